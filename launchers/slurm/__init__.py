"""``launcher=slurm``: the job as one ``sbatch`` batch job per run, its ranks started
with ``srun --mpi=pmix`` (or ``mpirun``) inside the allocation (docs/slurm.md)."""
