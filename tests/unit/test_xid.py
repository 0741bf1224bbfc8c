"""Unit tests of GPU health (jitbench.runtime.health: Xid table, NVML probe,
make_probe) against a fake NVML (no GPU needed), and of the simulated probe that
the xid fault feeds (jitbench.faults.xid).

The fake replaces the pynvml functions the probe calls (monkeypatch on the
real module) and emulates an event set with a blocking, timeout-honouring
wait, NotSupported queries, GPU-lost and nvmlInit failure.
"""

from __future__ import annotations

import json
import threading
import time

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jitbench.faults.xid import SimulatedProbe
from jitbench.runtime import health as X
from jitbench.runtime.health import nvml

REQUIRED = [13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140]


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Emulates the slice of NVML that NvmlProbe uses, for one or more devices."""

    def __init__(
        self,
        *,
        init_error: int | None = None,
        supported_types: int | None = None,
        register_mask_fails: bool = False,
        not_supported: set[str] = frozenset(),
        device_count: int = 1,
    ) -> None:
        self.init_error = init_error
        self.supported_types = (
            pynvml.nvmlEventTypeXidCriticalError
            | pynvml.nvmlEventTypeDoubleBitEccError
            | pynvml.nvmlEventTypeSingleBitEccError
            if supported_types is None
            else supported_types
        )
        self.register_mask_fails = register_mask_fails
        self.not_supported = set(not_supported)
        self.device_count = device_count
        self.init_count = 0
        self.shutdown_count = 0
        self.registered: dict[int, int] = {}  # event-set id -> mask
        self.freed: list[int] = []
        self.pending: list[tuple[int, int]] = []  # (eventType, eventData)
        self.lost = False
        self.cond = threading.Condition()
        self.wait_calls: list[int] = []

    # -- library ---------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "999.99"

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        if not 0 <= i < self.device_count:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return f"dev{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-1234":
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return "dev0"

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return int(handle[3:])

    # -- events ----------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, handle: str) -> int:
        if "supported_types" in self.not_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.supported_types

    def nvmlEventSetCreate(self) -> int:
        es = len(self.registered) + len(self.freed) + 100
        self.registered[es] = 0
        return es

    def nvmlDeviceRegisterEvents(self, handle: str, mask: int, es: int) -> None:
        if mask & ~self.supported_types:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.register_mask_fails and bin(mask).count("1") > 1:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.registered[es] |= mask

    def nvmlEventSetFree(self, es: int) -> None:
        self.registered.pop(es)
        self.freed.append(es)

    def push(self, event_type: int, data: int = 0) -> None:
        with self.cond:
            self.pending.append((event_type, data))
            self.cond.notify_all()

    def push_xid(self, code: int) -> None:
        self.push(pynvml.nvmlEventTypeXidCriticalError, code)

    def nvmlEventSetWait_v2(self, es: int, timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        self.wait_calls.append(timeout_ms)
        mask = self.registered[es]
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self.cond:
            while True:
                if self.lost:
                    raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
                for i, (t, d) in enumerate(self.pending):
                    if t & mask:
                        del self.pending[i]
                        ev = pynvml.c_nvmlEventData_t()
                        ev.eventType = t
                        ev.eventData = d
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
                self.cond.wait(left)

    # -- health queries ----------------------------------------------------
    def _maybe_unsupported(self, name: str) -> None:
        if name in self.not_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetEccMode(self, handle: str) -> list[int]:
        self._maybe_unsupported("ecc_mode")
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle: str, etype: int, ctype: int) -> int:
        self._maybe_unsupported("ecc")
        # corrected volatile=5, uncorrected volatile=1, aggregate = 10x
        base = 5 if etype == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1
        return base * (10 if ctype == pynvml.NVML_AGGREGATE_ECC else 1)

    def nvmlDeviceGetMemoryErrorCounter(self, handle: str, etype: int, ctype: int, loc: int) -> int:
        self._maybe_unsupported("ecc")
        if loc == pynvml.NVML_MEMORY_LOCATION_SRAM:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 3

    def nvmlDeviceGetRemappedRows(self, handle: str) -> tuple[int, int, int, int]:
        self._maybe_unsupported("remapped_rows")
        return (2, 1, 1, 0)

    def nvmlDeviceGetFieldValues(self, handle: str, field_ids: list[int]):
        self._maybe_unsupported("field_values")
        vals = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            vals[i].fieldId = fid
            if "recovery_action" in self.not_supported:
                vals[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                vals[i].nvmlReturn = pynvml.NVML_SUCCESS
                vals[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                vals[i].value.uiVal = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
        return vals

    NAMES = [
        "nvmlInit",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetFree",
        "nvmlEventSetWait_v2",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetMemoryErrorCounter",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetFieldValues",
    ]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for n in self.NAMES:
            monkeypatch.setattr(pynvml, n, getattr(self, n))
        return self


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    monkeypatch.delenv(X.PROBE_ENV, raising=False)
    return FakeNvml().install(monkeypatch)


# ------------------------------------------------------------------ table


def test_table_has_the_required_codes():
    for code in REQUIRED:
        info = X.XID_TABLE[code]
        assert info.code == code and info.known
        assert info.meaning and info.action


@pytest.mark.parametrize("code", [48, 79, 94, 95, 62, 64, 74, 119, 120, 140])
def test_fatal_codes(code):
    assert X.describe_xid(code).fatal
    assert code in X.FATAL_XIDS


@pytest.mark.parametrize("code", [13, 31, 43, 45, 63, 68, 92])
def test_non_fatal_codes(code):
    assert not X.describe_xid(code).fatal
    assert code not in X.FATAL_XIDS


def test_unknown_xid_is_fatal_and_marked_unknown():
    info = X.describe_xid(4242)
    assert info.code == 4242 and info.fatal and not info.known
    assert info.meaning == "unknown Xid"


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_describe_xid_total(code):
    info = X.describe_xid(code)
    assert info.code == code
    assert info.fatal is (X.XID_TABLE[code].fatal if code in X.XID_TABLE else True)


# ------------------------------------------------------------------ NvmlProbe


def test_nvml_probe_decodes_xid_event(fake):
    p = X.NvmlProbe(0)
    assert p.registered == ["XidCriticalError", "DoubleBitEccError"]
    fake.push_xid(79)
    t0 = time.monotonic()
    evs = p.poll(1000)
    assert len(evs) == 1
    ev = evs[0]
    assert (ev.kind, ev.xid, ev.source, ev.device_index) == ("xid", 79, "nvml", 0)
    assert ev.info == X.describe_xid(79) and ev.fatal
    assert t0 <= ev.t_mono <= time.monotonic()
    json.dumps(ev.to_dict())  # serialisable for the event log
    p.close()


def test_nvml_probe_non_fatal_and_dbe_and_drain_order(fake):
    p = X.NvmlProbe(0)
    fake.push_xid(13)
    fake.push(pynvml.nvmlEventTypeDoubleBitEccError, 0)
    fake.push_xid(63)
    evs = p.poll(500)
    assert [(e.kind, e.xid, e.fatal) for e in evs] == [
        ("xid", 13, False),
        ("dbe", 48, True),
        ("xid", 63, False),
    ]
    # The first wait uses the caller's timeout, the draining ones do not wait.
    assert fake.wait_calls[0] == 500 and all(w == 0 for w in fake.wait_calls[1:])
    p.close()


def test_nvml_probe_unknown_xid_is_fatal(fake):
    p = X.NvmlProbe(0)
    fake.push_xid(777)
    (ev,) = p.poll(100)
    assert ev.fatal and not ev.info.known and ev.xid == 777
    p.close()


def test_nvml_probe_timeout_is_no_event(fake):
    p = X.NvmlProbe(0)
    t0 = time.monotonic()
    assert p.poll(50) == []
    assert time.monotonic() - t0 >= 0.04
    assert "nvmlEventSetWait_v2" not in p.errors  # a timeout is not an error
    assert p.poll(0) == []
    p.close()


def test_nvml_probe_event_arriving_during_wait(fake):
    p = X.NvmlProbe(0)
    threading.Timer(0.05, fake.push_xid, args=(95,)).start()
    t0 = time.monotonic()
    evs = p.poll(2000)
    assert [e.xid for e in evs] == [95]
    assert time.monotonic() - t0 < 1.5
    p.close()


def test_nvml_probe_snapshot_supported(fake):
    p = X.NvmlProbe(0)
    s = p.snapshot()
    json.dumps(s)
    assert s["source"] == "nvml" and s["device_index"] == 0
    assert s["ecc_mode"] == {"current": 1, "pending": 1}
    assert s["ecc"]["total"]["volatile"] == {"corrected": 5, "uncorrected": 1}
    assert s["ecc"]["total"]["aggregate"] == {"corrected": 50, "uncorrected": 10}
    assert s["ecc"]["dram"]["volatile"]["corrected"] == 3
    assert s["ecc"]["sram"]["volatile"]["corrected"] is None  # fake: SRAM NotSupported
    assert "Not Supported" in s["errors"]["ecc.sram.volatile.corrected"]
    assert s["remapped_rows"] == {
        "corrected": 2,
        "uncorrected": 1,
        "pending": True,
        "failure": False,
    }
    assert s["recovery_action"] == {
        "code": pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
        "name": "GPU_RESET",
    }
    p.close()


def test_nvml_probe_not_supported_degrades_to_recorded_errors(monkeypatch):
    monkeypatch.delenv(X.PROBE_ENV, raising=False)
    FakeNvml(not_supported={"ecc_mode", "ecc", "remapped_rows", "recovery_action"}).install(
        monkeypatch
    )
    p = X.NvmlProbe(0)
    s = p.snapshot()
    assert s["ecc_mode"] == {"current": None, "pending": None}
    assert s["ecc"]["total"]["volatile"]["uncorrected"] is None
    assert s["remapped_rows"]["pending"] is None
    assert s["recovery_action"] == {"code": None, "name": None}
    for key in (
        "ecc_mode",
        "ecc.total.volatile.corrected",
        "ecc.dram.aggregate.uncorrected",
        "remapped_rows",
        "recovery_action",
    ):
        assert "Not Supported" in s["errors"][key], key
    p.close()


def test_nvml_probe_field_values_call_unsupported(monkeypatch):
    FakeNvml(not_supported={"field_values"}).install(monkeypatch)
    p = X.NvmlProbe(0)
    s = p.snapshot()
    assert s["recovery_action"]["code"] is None
    assert "Not Supported" in s["errors"]["recovery_action"]
    p.close()


def test_nvml_probe_missing_recovery_action_constant(fake, monkeypatch):
    monkeypatch.delattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")
    p = X.NvmlProbe(0)
    s = p.snapshot()
    assert "not provided" in s["errors"]["recovery_action"]
    p.close()


def test_nvml_probe_registers_only_supported_event_types(monkeypatch):
    # Ampere+ parts typically do not offer the DBE event: Xid events must still work.
    fake = FakeNvml(supported_types=pynvml.nvmlEventTypeXidCriticalError).install(monkeypatch)
    p = X.NvmlProbe(0)
    assert p.registered == ["XidCriticalError"]
    assert "register.DoubleBitEccError" in p.errors
    fake.push_xid(48)
    assert [e.xid for e in p.poll(200)] == [48]
    p.close()


def test_nvml_probe_register_falls_back_to_one_type_at_a_time(monkeypatch):
    FakeNvml(register_mask_fails=True, not_supported={"supported_types"}).install(monkeypatch)
    p = X.NvmlProbe(0, include_sbe=True)
    assert sorted(p.registered) == ["DoubleBitEccError", "SingleBitEccError", "XidCriticalError"]
    assert "Not Supported" in p.errors["nvmlDeviceRegisterEvents"]
    p.close()


def test_nvml_probe_without_any_event_type_still_waits(monkeypatch):
    fake = FakeNvml(supported_types=0).install(monkeypatch)
    p = X.NvmlProbe(0)
    assert p.registered == [] and fake.registered == {}
    t0 = time.monotonic()
    assert p.poll(50) == []
    assert time.monotonic() - t0 >= 0.04  # no busy loop
    p.close()


def test_nvml_probe_sbe_is_not_fatal(fake):
    p = X.NvmlProbe(0, include_sbe=True)
    fake.push(pynvml.nvmlEventTypeSingleBitEccError, 0)
    (ev,) = p.poll(200)
    assert (ev.kind, ev.xid, ev.fatal) == ("sbe", None, False)
    p.close()


def test_nvml_probe_gpu_lost(fake):
    p = X.NvmlProbe(0)
    fake.lost = True
    (ev,) = p.poll(100)
    assert (ev.kind, ev.xid, ev.fatal) == ("gpu_lost", 79, True)
    t0 = time.monotonic()
    assert p.poll(50) == []  # reported once, and the next poll does not spin
    assert time.monotonic() - t0 >= 0.04
    p.close()


def test_nvml_probe_by_uuid(fake):
    p = X.NvmlProbe(uuid="1234")
    assert p.device_index == 0
    p.close()


def test_nvml_probe_close_is_idempotent_and_frees(fake):
    p = X.NvmlProbe(0)
    p.close()
    p.close()
    assert fake.freed and fake.shutdown_count == 1
    assert p.poll(10) == []
    assert p.snapshot()["errors"]["probe"] == "closed"


def test_nvml_probe_close_while_polling(fake):
    p = X.NvmlProbe(0)
    out: list = []
    t = threading.Thread(target=lambda: out.append(p.poll(300)))
    t.start()
    time.sleep(0.05)
    p.close()  # waits for the poll in progress, then frees the event set
    t.join(2)
    assert not t.is_alive() and out == [[]]
    assert fake.freed


def test_nvml_probe_bad_index_raises_unavailable(fake):
    with pytest.raises(X.ProbeUnavailable, match="index 3"):
        X.NvmlProbe(3)
    assert fake.shutdown_count == fake.init_count == 1


# ------------------------------------------------------------------ make_probe


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIBRARY_NOT_FOUND]
)
def test_make_probe_falls_back_when_nvml_init_fails(monkeypatch, code):
    monkeypatch.delenv(X.PROBE_ENV, raising=False)
    FakeNvml(init_error=code).install(monkeypatch)
    p = X.make_probe(0, None, fallback=SimulatedProbe)
    assert isinstance(p, SimulatedProbe)
    assert "nvmlInit failed" in p.reason
    assert str(pynvml.NVMLError(code)) in p.reason
    p2 = X.make_probe(0, False, fallback=SimulatedProbe)  # even when asked for the real one: never raises
    assert isinstance(p2, SimulatedProbe)


def test_make_probe_falls_back_when_pynvml_missing(monkeypatch):
    monkeypatch.delenv(X.PROBE_ENV, raising=False)

    def boom():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml, "_import_pynvml", boom)
    p = X.make_probe(1, fallback=SimulatedProbe)
    assert isinstance(p, SimulatedProbe) and p.device_index == 1
    assert "not installed" in p.reason


def test_make_probe_falls_back_on_bad_device(fake):
    p = X.make_probe(5, fallback=SimulatedProbe)
    assert isinstance(p, SimulatedProbe)
    assert "index 5" in p.reason


def test_make_probe_prefers_nvml(fake):
    p = X.make_probe(0)
    assert isinstance(p, X.NvmlProbe)
    assert "999.99" in p.reason
    p.close()


def test_make_probe_simulate_true_and_env(fake, monkeypatch):
    assert isinstance(X.make_probe(0, True, fallback=SimulatedProbe), SimulatedProbe)
    monkeypatch.setenv(X.PROBE_ENV, "simulated")
    p = X.make_probe(0, fallback=SimulatedProbe)
    assert isinstance(p, SimulatedProbe) and X.PROBE_ENV in p.reason
    assert fake.init_count == 0


def test_make_probe_without_a_fallback_reports_nothing_and_says_why(monkeypatch):
    """A script using the runtime alone gets a silent probe where there is no NVML."""
    monkeypatch.delenv(X.PROBE_ENV, raising=False)
    FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    p = X.make_probe(2)
    assert isinstance(p, X.SilentProbe) and p.source == "none" and p.device_index == 2
    assert "nvmlInit failed" in p.reason
    t0 = time.monotonic()
    assert p.poll(50) == [] and time.monotonic() - t0 >= 0.04  # waits: a loop does not spin
    snap = p.snapshot()
    assert snap["errors"]["probe"] == p.reason and snap["ecc_mode"]["current"] is None
    p.close()
    assert p.poll(10_000) == []  # returns at once after close


# ------------------------------------------------------------------ SimulatedProbe


def test_simulated_round_trip_in_order():
    p = SimulatedProbe(0)
    codes = [13, 48, 63, 79, 94, 95, 4242]
    for c in codes:
        p.inject(c)
    evs = p.poll(0)
    assert [e.xid for e in evs] == codes
    assert [e.fatal for e in evs] == [X.describe_xid(c).fatal for c in codes]
    assert all(e.source == "simulated" and e.kind == "xid" for e in evs)
    assert p.poll(0) == []


def test_simulated_poll_timeout():
    p = SimulatedProbe(0)
    t0 = time.monotonic()
    assert p.poll(50) == []
    assert time.monotonic() - t0 >= 0.04


def test_simulated_inject_from_another_thread_while_polling():
    p = SimulatedProbe(0)
    threading.Timer(0.05, p.inject, args=(79,)).start()
    t0 = time.monotonic()
    evs = p.poll(5000)
    assert [e.xid for e in evs] == [79]
    assert time.monotonic() - t0 < 2.0
    assert evs[0].t_mono >= t0  # stamped at injection


def test_simulated_many_producers_keep_order():
    p = SimulatedProbe(0)
    n_threads, n_each = 4, 200
    start = threading.Barrier(n_threads)

    def produce(k: int) -> None:
        start.wait()
        for i in range(n_each):
            p.inject(1000 + k * n_each + i, device_index=k)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    got: list[X.GpuEvent] = []
    deadline = time.monotonic() + 10
    while len(got) < n_threads * n_each and time.monotonic() < deadline:
        got.extend(p.poll(100))
    for t in threads:
        t.join()
    assert len(got) == n_threads * n_each
    assert [e.xid for e in got] == [e.xid for e in p.injected]  # global injection order
    for k in range(n_threads):
        mine = [e.xid for e in got if e.device_index == k]
        assert mine == list(range(1000 + k * n_each, 1000 + (k + 1) * n_each))


def test_simulated_close_wakes_poll():
    p = SimulatedProbe(0)
    out: list = []
    t = threading.Thread(target=lambda: out.append(p.poll(10_000)))
    t.start()
    time.sleep(0.05)
    p.close()
    t.join(2)
    assert not t.is_alive() and out == [[]]
    assert p.poll(10) == []
    with pytest.raises(RuntimeError):
        p.inject(48)


def test_simulated_snapshot_counters():
    p = SimulatedProbe(0)
    s0 = p.snapshot()
    assert s0["ecc"]["total"]["volatile"] == {"corrected": 0, "uncorrected": 0}
    assert s0["recovery_action"]["name"] == "NONE" and s0["errors"] == {}
    p.inject(None, kind="dbe")
    p.inject(92)
    p.inject(13)
    p.inject(48, device_index=1)  # another device: not counted here
    s = p.snapshot()
    json.dumps(s)
    assert s["source"] == "simulated"
    assert s["ecc"]["total"]["volatile"] == {"corrected": 1, "uncorrected": 1}
    assert s["ecc"]["dram"]["aggregate"]["uncorrected"] == 1
    assert s["remapped_rows"]["pending"] is True
    assert s["recovery_action"]["name"] == "GPU_RESET"
    p.inject(95)
    assert p.snapshot()["ecc"]["sram"]["volatile"]["uncorrected"] == 1
    p.inject(79)
    assert p.snapshot()["recovery_action"]["name"] == "NODE_REBOOT"
    # Snapshot is a copy.
    s["ecc"]["total"]["volatile"]["corrected"] = 99
    assert p.snapshot()["ecc"]["total"]["volatile"]["corrected"] == 1


def test_simulated_kinds():
    p = SimulatedProbe(2)
    d = p.inject(None, kind="dbe")
    s = p.inject(None, kind="sbe")
    g = p.inject(None, kind="gpu_lost")
    assert (d.xid, d.fatal, d.device_index) == (48, True, 2)
    assert (s.xid, s.fatal) == (None, False)
    assert (g.xid, g.fatal) == (79, True)
    with pytest.raises(ValueError):
        p.inject(None)


def test_probe_is_context_manager(fake):
    with X.make_probe(0) as p:
        assert isinstance(p, X.HealthProbe)
    assert fake.shutdown_count == 1


# ------------------------------------------------------------------ check_gpu.py


def test_check_gpu_script_against_fake_nvml(fake, tmp_path, monkeypatch):
    """tests/gpu/check_gpu.py runs once on a lent GPU; make sure it cannot crash there."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "gpu" / "check_gpu.py"
    spec = importlib.util.spec_from_file_location("check_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # Queries the fake does not provide hit the real pynvml, which fails here
    # (no library): they must be recorded, not raised.
    out = tmp_path / "gpu.json"
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    fake.push_xid(63)
    rc = mod.main(["check_gpu.py", str(out), "0.2"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["nvml_init"] == "ok" and data["driver_version"] == "999.99"
    dev = data["device0"]
    assert dev["ecc"]["total"]["volatile"]["corrected"] == 5
    assert dev["ecc"]["sram"]["volatile"]["corrected"] is None
    assert "ecc.sram.volatile.corrected" in data["errors"]
    assert "name" in data["errors"]  # real nvmlDeviceGetName failed: recorded
    assert dev["recovery_action"]["name"] == "NVML_GPU_RECOVERY_ACTION_GPU_RESET"
    assert dev["event_set"]["registered"] == ["XidCriticalError", "DoubleBitEccError"]
    assert [e["eventData"] for e in dev["event_set"]["events"]] == [63]
    assert data["jitbench"]["probe"] == "NvmlProbe"
