"""Analytic wasted-work model (jitbench.reports.model)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitbench.reports import model as M
from jitbench.reports.model import ModelParams, estimate, find_crossovers

DEFAULT = ModelParams()


# ------------------------------------------------------------------ Young/Daly optimum


@settings(max_examples=300, deadline=None)
@given(
    n_gpus=st.integers(1, 1_000_000),
    mtbf_hours=st.floats(10.0, 1e7),
    checkpoint_s=st.floats(0.01, 7200.0),
    restart_s=st.floats(0.0, 7200.0),
    factor=st.floats(1e-3, 1e3),
)
def test_young_daly_rate_minimises_periodic_waste(n_gpus, mtbf_hours, checkpoint_s, restart_s,
                                                  factor):
    f = 1.0 / (mtbf_hours * 3600.0)
    c_star = M.young_daly_checkpoints_per_s(n_gpus, f, checkpoint_s)
    w_star = M.periodic_wasted_gpu_s(n_gpus, 86400.0, checkpoint_s, c_star, f, restart_s)
    w_other = M.periodic_wasted_gpu_s(n_gpus, 86400.0, checkpoint_s, c_star * factor, f,
                                      restart_s)
    assert w_star <= w_other * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(
    n_gpus=st.integers(1, 1_000_000),
    mtbf_hours=st.floats(10.0, 1e7),
    checkpoint_s=st.floats(0.01, 7200.0),
    restart_s=st.floats(0.0, 7200.0),
)
def test_young_daly_rate_is_the_grid_minimum(n_gpus, mtbf_hours, checkpoint_s, restart_s):
    f = 1.0 / (mtbf_hours * 3600.0)
    c_star = M.young_daly_checkpoints_per_s(n_gpus, f, checkpoint_s)
    grid = c_star * np.geomspace(1e-2, 1e2, 401)
    w = [M.periodic_wasted_gpu_s(n_gpus, 1.0, checkpoint_s, c, f, restart_s) for c in grid]
    assert abs(grid[int(np.argmin(w))] / c_star - 1) < 0.03


@settings(max_examples=100, deadline=None)
@given(
    n_gpus=st.integers(1, 1_000_000),
    mtbf_hours=st.floats(10.0, 1e7),
    checkpoint_s=st.floats(0.01, 7200.0),
    stall=st.floats(0.01, 1.0),
    factor=st.floats(1e-3, 1e3),
)
def test_async_optimum_minimises_async_waste(n_gpus, mtbf_hours, checkpoint_s, stall, factor):
    f = 1.0 / (mtbf_hours * 3600.0)
    c_star = M.periodic_async_optimal_checkpoints_per_s(n_gpus, f, checkpoint_s, stall)
    w = [M.periodic_async_wasted_gpu_s(n_gpus, 1.0, checkpoint_s, c, f, 60.0, stall)
         for c in (c_star, c_star * factor)]
    assert w[0] <= w[1] * (1 + 1e-12)


def test_young_interval_matches_optimal_rate_and_daly_refines_it():
    o, mtbf_s = 60.0, 3.0 * 3600
    n = 16384
    f = 1.0 / (mtbf_s * n)  # per-GPU rate giving a job MTBF of mtbf_s
    assert 1.0 / M.young_daly_checkpoints_per_s(n, f, o) == pytest.approx(
        M.young_interval_s(o, mtbf_s))
    assert M.young_interval_s(o, mtbf_s) == pytest.approx(math.sqrt(2 * o * mtbf_s))
    daly = M.daly_interval_s(o, mtbf_s)
    # Daly's compute interval is Young's less ~o plus small higher-order terms
    assert M.young_interval_s(o, mtbf_s) - o < daly < M.young_interval_s(o, mtbf_s)
    assert M.daly_interval_s(3 * mtbf_s, mtbf_s) == mtbf_s


def test_periodic_estimate_is_the_formula_at_the_optimum():
    n = 4096
    e = estimate("periodic", n, DEFAULT)
    f = DEFAULT.failure_rate_per_gpu_s
    c = M.young_daly_checkpoints_per_s(n, f, DEFAULT.checkpoint_s)
    w = M.periodic_wasted_gpu_s(n, 86400.0, DEFAULT.checkpoint_s, c, f, DEFAULT.recovery_s())
    assert e.interval_s == pytest.approx(1 / c)
    assert e.wasted_gpu_hours_per_day == pytest.approx(w / 3600.0)
    assert e.goodput == pytest.approx(1 - e.waste_fraction)
    assert e.wasted_gpu_hours_per_day == pytest.approx(n * 24 * e.waste_fraction)
    assert e.failures_per_day == pytest.approx(n * 24 / DEFAULT.mtbf_hours_per_gpu)


def test_async_estimate_charges_the_stall_and_one_write_of_lost_work():
    n = 4096
    e = estimate("periodic-async", n, DEFAULT)
    f = DEFAULT.failure_rate_per_gpu_s
    w = M.periodic_async_wasted_gpu_s(n, 86400.0, DEFAULT.checkpoint_s, 1 / e.interval_s, f,
                                      DEFAULT.recovery_s(), DEFAULT.async_stall_fraction)
    assert e.wasted_gpu_hours_per_day == pytest.approx(w / 3600.0)
    assert e.interval_s >= DEFAULT.checkpoint_s  # one write in flight at most
    assert e.waste_fraction < estimate("periodic", n, DEFAULT).waste_fraction


def test_waste_is_clipped_to_all_gpu_time():
    p = replace(DEFAULT, mtbf_hours_per_gpu=10.0)
    e = estimate("periodic", 100_000, p)
    assert e.waste_fraction == 1.0 and e.goodput == 0.0


# ------------------------------------------------------------------ JIT


def test_jit_has_no_restart_term_when_transparent():
    for n in (64, 4096, 100_000):
        jit, tr = estimate("jit", n, DEFAULT), estimate("jit-transparent", n, DEFAULT)
        assert tr.waste_fraction < jit.waste_fraction
        assert jit.recovery_per_failure_s - tr.recovery_per_failure_s == pytest.approx(
            DEFAULT.restart_s * (1 - jit.jit_fallback_probability), rel=1e-6)


def test_jit_per_failure_cost_without_fallbacks():
    only_gpu = (M.FailureCause("faulty GPU", "GPU", 1, 100.0, "gpu"),)
    p = replace(DEFAULT, causes=only_gpu, fallback_interval_s=math.inf)
    n = 1024
    e = estimate("jit", n, p)
    lam = M.job_failure_rate_per_s(n, p.mtbf_hours_per_gpu)
    p_s = -math.expm1(-lam * (p.detect_s + p.save_s))
    ok = p.detect_s + p.save_s + p.restart_s + p.restore_s + p.step_s / 2
    assert e.jit_fallback_probability == pytest.approx(p_s)
    assert e.recovery_per_failure_s == pytest.approx(
        (1 - p_s) * ok + p_s * ((p.detect_s + p.save_s) / 2 + 1 / lam))
    assert e.steady_state_fraction == 0.0


def test_jit_waste_grows_slower_in_world_size_than_periodic_and_they_cross():
    # JIT: constant steady cost per GPU + N^2 f r; periodic: N^1.5 sqrt(2 f o) + N^2 f r.
    # While the N^1.5 term dominates periodic's waste, JIT's grows more slowly in N.
    # (At 10^4+ GPUs both approach N^2, the restart term, and the ratio creeps back.)
    ns = [8, 64, 512]
    jit = [estimate("jit", n, DEFAULT).wasted_gpu_hours_per_day for n in ns]
    per = [estimate("periodic", n, DEFAULT).wasted_gpu_hours_per_day for n in ns]
    ratio = np.array(jit) / np.array(per)
    assert np.all(np.diff(ratio) < 0)
    slope = lambda y: np.diff(np.log(y)) / np.diff(np.log(ns))  # noqa: E731
    assert np.all(slope(jit) < slope(per))
    cross = find_crossovers(DEFAULT, "jit", "periodic", 8, 100_000)
    assert len(cross) == 1
    c = cross[0]
    assert (c.below, c.above) == ("periodic", "jit")
    assert (estimate("jit", c.n_gpus, DEFAULT).waste_fraction
            <= estimate("periodic", c.n_gpus, DEFAULT).waste_fraction)
    assert (estimate("jit", c.n_gpus - 1, DEFAULT).waste_fraction
            > estimate("periodic", c.n_gpus - 1, DEFAULT).waste_fraction)


def test_crossover_moves_with_jit_overhead():
    base = find_crossovers(DEFAULT, "jit", "periodic", 1, 10**6)[0].n_gpus
    slower = find_crossovers(replace(DEFAULT, jit_overhead_fraction=0.01), "jit", "periodic",
                             1, 10**6)[0].n_gpus
    assert slower > base


def test_crossovers_over_multiples_of_the_replica_count():
    """An HSDP job of R replicas per shard is R x S GPUs: the scan looks at multiples of
    R only, so an odd world size whose layout leaves one shard a single replica is not
    reported as a crossover of its own."""
    tiny = replace(DEFAULT, step_s=0.14, checkpoint_s=0.02, restart_s=8.0, detect_s=0.1,
                   save_s=0.15, restore_s=0.14, replicas_per_shard=2)
    every = find_crossovers(tiny, "jit", "periodic", 1, 1000)
    assert len(every) > 20 and any(c.n_gpus % 2 for c in every)  # odd N flip the winner
    even = find_crossovers(tiny, "jit", "periodic", 1, 1000, multiple_of=2)
    assert [(c.n_gpus, c.above) for c in even] == [(4, "periodic"), (16, "jit"), (302, "periodic")]
    for c in even:  # the winner changes between the multiples just below and at n_gpus
        lo, hi = c.n_gpus - 2, c.n_gpus
        assert (M.unclipped_waste_fraction(c.above, hi, tiny)
                < M.unclipped_waste_fraction(c.below, hi, tiny))
        assert (M.unclipped_waste_fraction(c.below, lo, tiny)
                <= M.unclipped_waste_fraction(c.above, lo, tiny))
    assert find_crossovers(DEFAULT, "jit", "periodic", 1, 10**6, multiple_of=1) \
        == find_crossovers(DEFAULT, "jit", "periodic", 1, 10**6)
    assert find_crossovers(DEFAULT, "jit", "periodic", 5, 7, multiple_of=8) == []
    with pytest.raises(ValueError, match="multiple_of"):
        find_crossovers(DEFAULT, multiple_of=0)


def test_no_crossover_when_one_side_always_wins():
    # no steady cost and nothing that forces a fall back: JIT wins at every size
    only_gpu = (M.FailureCause("faulty GPU", "GPU", 1, 100.0, "gpu"),)
    cheap = replace(DEFAULT, causes=only_gpu, fallback_interval_s=math.inf)
    assert find_crossovers(cheap, "jit", "periodic", 8, 100_000) == []
    assert all(estimate("jit", n, cheap).waste_fraction < estimate("periodic", n, cheap).waste_fraction
               for n in (8, 1000, 100_000))


# ------------------------------------------------------------------ topology / causes


def test_llama3_table5_counts_and_weights():
    causes = M.LLAMA3_TABLE5
    assert sum(c.count for c in causes) == M.LLAMA3_TOTAL_INTERRUPTIONS == 419
    assert DEFAULT.cause_weights().sum() == pytest.approx(1.0)
    for c in causes:
        if c.name != "faulty GPU":  # printed 30.1 % for 148/419 = 35.3 % in the paper
            assert 100 * c.count / 419 == pytest.approx(c.paper_pct, abs=0.06)
    assert M.LLAMA3_MTBF_HOURS_PER_GPU == pytest.approx(16384 * 54 * 24 / 419)
    assert {c.scope for c in causes} == {"gpu", "host", "state"}


def test_topology_pure_data_parallel():
    t = M.topology(64, 8, None)
    assert not t.rank_breaks.any() and not t.host_breaks.any()
    t = M.topology(8, 8, None)  # one host holds every replica
    assert not t.rank_breaks.any() and t.host_breaks.all()
    t = M.topology(1, 8, None)
    assert t.rank_breaks.all()


def test_topology_hybrid_and_full_sharding():
    assert M.topology(64, 8, 1).rank_breaks.all()  # FSDP: one replica per shard
    assert M.topology(64, 8, 1).host_breaks.all()
    t = M.topology(16, 8, 2)  # shard group = one host, replica on the other host
    assert not t.rank_breaks.any() and not t.host_breaks.any()
    t = M.topology(8, 8, 2)  # both replicas on the same host
    assert not t.rank_breaks.any() and t.host_breaks.all()
    t = M.topology(64, 8, 4)
    assert not t.host_breaks.any()


def test_jit_break_probability_by_topology():
    w = DEFAULT.cause_weights()
    sdc = sum(wi for wi, c in zip(w, DEFAULT.causes, strict=True) if c.scope == "state")
    host = sum(wi for wi, c in zip(w, DEFAULT.causes, strict=True) if c.scope == "host")
    assert M.jit_break_probability(DEFAULT, 64) == pytest.approx(sdc)
    assert M.jit_break_probability(DEFAULT, 8) == pytest.approx(sdc + host)
    assert M.jit_break_probability(replace(DEFAULT, replicas_per_shard=1), 64) == pytest.approx(1)
    fsdp = estimate("jit", 4096, replace(DEFAULT, replicas_per_shard=1))
    assert fsdp.waste_fraction > estimate("jit", 4096, DEFAULT).waste_fraction


def test_mean_age_mod_limits_and_value():
    assert M.mean_age_mod_s(1e-12, 100.0) == pytest.approx(50.0)
    assert M.mean_age_mod_s(0.01, math.inf) == pytest.approx(100.0)
    rng = np.random.default_rng(0)
    x = rng.exponential(1 / 0.001, size=400_000)
    assert M.mean_age_mod_s(0.001, 700.0) == pytest.approx(np.mean(x % 700.0), rel=0.01)


@pytest.mark.parametrize("field,value", [
    ("mtbf_hours_per_gpu", 0.0), ("step_s", 0.0), ("checkpoint_s", -1.0),
    ("restart_s", math.nan), ("async_stall_fraction", 1.5), ("gpus_per_host", 0),
    ("replicas_per_shard", 0), ("fallback_interval_s", 0.0),
])
def test_validation_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        replace(DEFAULT, **{field: value}).validate()


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown strategy"):
        estimate("periodic:10", 8, DEFAULT)
