"""Per-rank CPU thread plans: N ranks on N cores must not oversubscribe."""

from cifar_dist.training.process import threads


def _machine(monkeypatch, cores, visible):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(threads, "available_cores", lambda: visible)


def test_unbound_ranks_split_the_machine(monkeypatch):
    _machine(monkeypatch, cores=8, visible=8)
    assert threads.plan_threads(local_size=1).intra_op == 8
    plan = threads.plan_threads(local_size=4)
    assert (plan.intra_op, plan.inter_op) == (2, 2)
    assert threads.plan_threads(local_size=16).intra_op == 1


def test_bound_rank_uses_its_cores(monkeypatch):
    # mpirun --bind-to core: the affinity mask is the rank's share already.
    _machine(monkeypatch, cores=2, visible=1)
    plan = threads.plan_threads(local_size=2)
    assert (plan.intra_op, plan.inter_op) == (1, 1)
    assert "bound" in plan.reason


def test_explicit_settings_win(monkeypatch):
    _machine(monkeypatch, cores=2, visible=2)
    plan = threads.plan_threads(local_size=2, intra_op=3, inter_op=4)
    assert (plan.intra_op, plan.inter_op) == (3, 4)
