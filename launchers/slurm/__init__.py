"""``launcher=slurm``: the job as one ``sbatch`` batch job per run (a sweep: one job array), its ranks started
with ``srun --mpi=pmix`` (or ``mpirun``) inside the allocation (docs/slurm.md)."""
