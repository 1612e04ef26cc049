"""What a data set in memory costs at its peak (issue 57 item 17: a 1.07 GB source peaked at 4.9 GB of RSS, so a
source at the budget, then half of the memory, needed twice the machine's): a third of the memory at most, and at
most twice the set's images beyond the framework's own memory (docs/data.md, "Memory")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from cifar_dist.data import DataError, DataSources
from cifar_dist.data import sources as sources_module
from cifar_dist.data.sources import cgroup_limits, read_sources
from helpers.cli import cli_env
from helpers.paths import REPO

pytestmark = [pytest.mark.both_stacks, pytest.mark.jax_stack]

MIB = 2**20
COMPILING = 96 * MIB  # XLA compiling the input's programs (its cache is off here): the same for any size of data

# Run in a process of its own (its peak RSS is its own): the budget lowered to BUDGET (the memory it assumes is
# three times that), a factory's source of records read one by one (as from storage) just under it, read into
# memory and handed to an engine's training and test input as a run does; prints the peak of the process's own
# (anonymous) memory beyond what it held before the data, and the images' size.
NEAR_THE_BUDGET = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import numpy as np
    from omegaconf import OmegaConf
    from cifar_dist.config.data_options import CustomDataConfig
    from cifar_dist.config.schema import TrainerConfig
    from cifar_dist.data import DataSources, load_dataset, sources
    from cifar_dist.training.engines import start_engine

    budget, count, engine_name, placement = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    sources.host_memory = lambda: 3 * budget  # what a machine (or a cgroup) of this memory gives

    class Stored:  # a grain-style source whose records are read from storage: a new array each time
        def __init__(self, n):
            self.n = n
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            return np.full((32, 32, 3), i % 251, np.uint8), i % 10

    def factory(seed):
        return DataSources(Stored(count), Stored(count // 5))

    sys.modules["near_budget"] = sys.modules[__name__]
    trainer = OmegaConf.merge(OmegaConf.structured(TrainerConfig), {"compilation_cache": ""})  # compiled here
    engine = start_engine(engine_name, trainer)
    def anonymous():  # the process's own memory: not the pages of its libraries, which page cache sharing varies
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))
    before, peak, done = anonymous(), [0], threading.Event()
    def watch():  # every 2 ms: a copy of the images (150 MiB) takes longer than that
        while not done.is_set():
            peak[0] = max(peak[0], anonymous())
            time.sleep(0.002)
    watcher = threading.Thread(target=watch)
    watcher.start()
    cfg = OmegaConf.merge(OmegaConf.structured(CustomDataConfig), {"_target_": "near_budget.factory"})
    data = load_dataset(cfg, 0, arrays=engine_name == "jax")
    augment = OmegaConf.create({"enabled": False})
    common = dict(batch_size=128, rank=0, size=1)
    train = engine.train_input(
        data, shard=False, seed=0, initial_epoch=0, epochs=1, augment=augment, placement=placement, **common
    )
    validation = engine.eval_input(data, equal_shards=True, **common)
    test = engine.eval_input(data, equal_shards=False, **common)
    if engine_name != "jax":  # tf.data reads its batches only when iterated
        for stream in (train, validation, test):
            for _ in stream.dataset.take(3):
                pass
    done.set()
    watcher.join()
    print(json.dumps({"peak": max(peak[0], anonymous()) - before, "images": data.x_train.nbytes + data.x_test.nbytes}))
    """
)


def engines():
    """engine=jax resident (on the CPU, the "device" is this memory: a second copy) and streamed, and a TensorFlow
    engine where TensorFlow is installed."""
    import importlib.util

    cases = [("jax", "auto", 2.1), ("jax", "stream", 1.25)]
    if importlib.util.find_spec("tensorflow") is not None:
        cases.append(("tensorflow", "auto", 1.25))
    return cases


@pytest.mark.parametrize("engine, placement, most", engines())
def test_a_source_near_the_budget_peaks_at_most_twice_its_images(tmp_path, engine, placement, most):
    """Before: records stacked from a list (2x while read), the process's rows copied (``x_train[rows]``, and
    ``x_test[rows]``), tf.constant of the set (2x more): 3.9x on TensorFlow, 3.0x on jax, beyond the framework."""
    budget, image = 160 * MIB, 32 * 32 * 3
    count = int(0.94 * budget / image / 1.2)  # the train split and a test split of a fifth: 94 % of the budget
    script = tmp_path / "near_budget.py"
    script.write_text(NEAR_THE_BUDGET)
    done = subprocess.run(
        [sys.executable, str(script), str(budget), str(count), engine, placement],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["images"] > 0.9 * budget
    assert measured["peak"] <= most * measured["images"] + COMPILING, measured
    assert measured["peak"] < 2 * budget + COMPILING  # what the budget leaves for the data at its peak (of 3x)


def test_a_source_over_the_budget_is_refused_before_it_is_read(monkeypatch):
    """The budget is a third of the memory (``host_memory``: the machine's, or its cgroup's limit)."""
    monkeypatch.setattr(sources_module, "host_memory", lambda: 3 * 100 * 3072)
    read = []

    class Counted(list):
        def __getitem__(self, i):
            read.append(i)
            return super().__getitem__(i)

    import numpy as np

    records = Counted([(np.zeros((32, 32, 3), np.uint8), 0)] * 101)
    with pytest.raises(DataError, match=r"^the train source of here holds 101 records of 0\.0 MiB.* more than the"):
        read_sources(DataSources(records, [], ()), "here")
    assert read == [0]  # the first record only: its size times the count is over the budget


def test_the_processes_of_a_host_share_its_budget(monkeypatch):
    """Each of the job's processes on a host reads its own copy of the set (every rank, on the TensorFlow engines;
    every process, on engine=jax): 4 of them may each take a quarter of the third, or together they would need
    the whole memory. The refusal names the share."""
    import numpy as np

    monkeypatch.setattr(sources_module, "host_memory", lambda: 3 * 100 * 3072)  # a third: 100 images
    assert [sources_module.host_memory_budget(n) for n in (1, 4)] == [100 * 3072, 25 * 3072]
    image = (np.zeros((32, 32, 3), np.uint8), 0)
    thirty = DataSources([image] * 30, [image] * 5, ())
    assert len(read_sources(thirty, "here", sources_module.host_memory_budget(1)).x_train) == 30
    with pytest.raises(DataError, match=r"more than the 0\.0 GiB a process may hold \(a third of this host's memory, "
                       r"shared by the job's processes on it"):  # fmt: skip
        read_sources(thirty, "here", sources_module.host_memory_budget(4))


def test_the_trainer_and_the_evaluation_read_the_data_as_one_of_their_hosts_processes(monkeypatch):
    """What tells ``load_dataset`` how many processes share the host: the trainer's and the evaluation's world."""
    from types import SimpleNamespace

    import numpy as np

    from cifar_dist.evaluation import inputs
    from cifar_dist.training import trainer

    asked = []
    data = SimpleNamespace(source="s", train_size=1, test_size=1, num_classes=2, class_names=("a", "b"),
                           x_test=np.zeros((1, 32, 32, 3), np.uint8), y_test=np.zeros(1, np.int64))  # fmt: skip

    def load_dataset(*args, **kwargs):
        asked.append(kwargs.get("processes_here", 1))
        return data

    monkeypatch.setattr(trainer, "load_dataset", load_dataset)
    monkeypatch.setattr(trainer, "check_same_on_every_rank", lambda *args: None)
    monkeypatch.setattr(inputs, "load_dataset", load_dataset)
    run = SimpleNamespace(cfg=SimpleNamespace(data=None), trainer=SimpleNamespace(seed=0),
                          engine=SimpleNamespace(facts=SimpleNamespace(keras_fit=True), allgather_object=None),
                          world=SimpleNamespace(local_processes=4, is_chief=False))  # fmt: skip
    assert trainer.load_data(run) is data
    assert inputs.load_images("test", None, ("a", "b"), processes_here=3).source == "s (test)"
    assert asked == [4, 3]


def test_the_memory_a_cgroup_allows_is_found_in_v1_and_v2_and_the_smallest_counts(tmp_path):
    """A container or a Slurm job's ``--mem`` is a cgroup: its limit, not the machine's memory, is what the kernel
    holds the process to (it kills it past it)."""
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("2147483648\n")
    (v2 / "job" / "step" / "memory.max").write_text("max\n")
    membership = tmp_path / "cgroup"
    membership.write_text("0::/job/step\n")
    assert cgroup_limits(v2, membership) == [2147483648]
    v1 = tmp_path / "v1"
    (v1 / "memory" / "slurm" / "uid_0" / "job_7").mkdir(parents=True)
    (v1 / "memory" / "slurm" / "uid_0" / "job_7" / "memory.limit_in_bytes").write_text("1073741824\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    membership.write_text("5:cpu,cpuacct:/slurm/uid_0/job_7\n4:memory:/slurm/uid_0/job_7\n1:name=systemd:/\n")
    assert sorted(cgroup_limits(v1, membership)) == [1073741824, 9223372036854771712]
    assert cgroup_limits(v1, tmp_path / "no such file") == []
