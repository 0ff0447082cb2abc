"""The Kubernetes backend's client code against an in-process fake API server (``fake_api.py``:
no API server can run here): lifecycle, failures, warm pool. Exec, terminals, files and grader pods
against the fake's exec WebSocket: ``test_fake_api_exec.py`` and the contract suite
(``kubernetes-fake_api``); on a real cluster: ``make test-kubernetes``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from labserver.backends.base import EnvSpec, EnvState, ProvisionError, Stoppable, WarmPooled
from labserver.backends.kubernetes import manifests as km
from labserver.backends.kubernetes.backend import KubernetesBackend
from labserver.config import Settings
from tests.backends.kubernetes import fake_api
from tests.backends.kubernetes.fake_api import FakeCluster

CARD = "huawei.com/Ascend910"
NO_CARD = f"0/3 nodes are available: 3 Insufficient {CARD}. preemption: 0/3 nodes are available."


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster()
    yield c
    c.close()


def backend_for(settings: Settings, cluster: FakeCluster, **kube: object) -> KubernetesBackend:
    cfg = settings.kubernetes.model_copy(update={"namespace": "t", "api_attempts": 3, **kube})
    b = KubernetesBackend(
        settings.model_copy(update={"kubernetes": cfg}), configuration=cluster.configuration()
    )
    b.poll_s = 0.01
    return b


def spec(env_id: str = "ev1-at1", device: str = "cpu", event_id: int = 1) -> EnvSpec:
    return EnvSpec(env_id=env_id, event_id=event_id, attendee_id=1, device=device, image="reg.example/lab:1")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_fake_api_create_is_idempotent_labels_and_discover(settings: Settings, cluster: FakeCluster) -> None:
    b = backend_for(settings, cluster)
    assert isinstance(b, Stoppable) and isinstance(b, WarmPooled)

    async def go() -> None:
        ref = await b.create(spec())
        again = await b.create(spec())
        assert (
            (ref.env_id, ref.infra_id)
            == (again.env_id, again.infra_id)
            == ("ev1-at1", km.pod_name("ev1-at1"))
        )
        assert (await b.status(ref)).state == EnvState.ready
        found = await backend_for(settings, cluster).discover()  # a restarted server
        assert [r.env_id for r in found] == ["ev1-at1"] and found[0].data["pvc"] == km.pvc_name("ev1-at1")

    run(go())
    assert cluster.count("POST", "pods") == 1
    assert cluster.names("persistentvolumeclaims") == [km.pvc_name("ev1-at1")]
    assert set(cluster.names("networkpolicies")) == {"labserver-no-network", "labserver-network"}
    pod = cluster.objects[("pods", km.pod_name("ev1-at1"))]
    assert pod["metadata"]["labels"][km.LABEL_INSTANCE] == "labserver"
    assert pod["metadata"]["annotations"][km.ANNOTATION_ENV] == "ev1-at1"


def test_fake_api_thirty_creates_at_once(settings: Settings, cluster: FakeCluster) -> None:
    """Thirty attendees at once, and one attendee's create thirty times at once: one pod each."""
    b = backend_for(settings, cluster)

    async def go() -> None:
        refs = await asyncio.gather(*(b.create(spec(f"ev1-at{i}")) for i in range(30)))
        same = await asyncio.gather(*(b.create(spec("ev1-at99")) for _ in range(30)))
        assert len({r.infra_id for r in refs}) == 30 and len({r.infra_id for r in same}) == 1

    run(go())
    assert len(cluster.names("pods")) == 31 and cluster.count("POST", "pods") == 31


def test_fake_api_progress_comes_from_pod_events(settings: Settings, cluster: FakeCluster) -> None:
    name = km.pod_name("ev1-at1")
    cluster.events[name] = [
        {"metadata": {"uid": str(i)}, "reason": r, "lastTimestamp": f"2026-01-01T00:00:0{i}Z"}
        for i, r in enumerate(["Scheduled", "Pulling", "Pulled", "Created", "Started"])
    ]
    phases: list[str] = []

    async def progress(phase: str, message: str) -> None:
        phases.append(phase)

    run(backend_for(settings, cluster).create(spec(), progress))
    assert phases[-1] == "ready"
    assert [p for p in phases if p in ("placing", "pulling", "starting")][-3:] == [
        "placing",
        "pulling",
        "starting",
    ]


def test_fake_api_no_card_falls_back_to_cpu_emulation_and_says_so(
    settings: Settings, cluster: FakeCluster
) -> None:
    cluster.on_pod = lambda pod: (
        fake_api.unschedulable(NO_CARD)
        if CARD in pod["spec"]["containers"][0]["resources"]["limits"]
        else fake_api.ready(pod)
    )
    b = backend_for(settings, cluster)
    ref = run(b.create(spec(device="any")))
    assert ref.device == "cpu-emu"
    status = run(b.status(ref))
    assert (
        status.state == EnvState.ready and "CPU emulation" in status.message and "CPU 仿真" in status.message
    )
    pod = cluster.objects[("pods", km.pod_name("ev1-at1"))]
    assert CARD not in pod["spec"]["containers"][0]["resources"]["limits"]


def test_fake_api_no_card_for_an_npu_only_lab_is_told(settings: Settings, cluster: FakeCluster) -> None:
    cluster.on_pod = lambda pod: fake_api.unschedulable(NO_CARD)
    with pytest.raises(ProvisionError) as err:
        run(backend_for(settings, cluster).create(spec(device="npu")))
    assert err.value.reason == "no-card" and "Ascend" in err.value.message and "昇腾" in err.value.message
    assert cluster.names("pods") == []  # no pending pod left behind
    assert cluster.names("persistentvolumeclaims") == [km.pvc_name("ev1-at1")]


def test_fake_api_full_cluster_is_a_retryable_no_room(settings: Settings, cluster: FakeCluster) -> None:
    cluster.on_pod = lambda pod: fake_api.unschedulable("0/3 nodes are available: 3 Insufficient memory.")
    with pytest.raises(ProvisionError) as err:
        run(backend_for(settings, cluster).create(spec()))
    assert err.value.reason == "no-room" and "集群" in err.value.message


def test_fake_api_image_pull_error(settings: Settings, cluster: FakeCluster) -> None:
    cluster.on_pod = lambda pod: fake_api.waiting(
        "ImagePullBackOff", 'Back-off pulling image "reg.example/lab:1"'
    )
    with pytest.raises(ProvisionError) as err:
        run(backend_for(settings, cluster).create(spec()))
    assert err.value.reason == "image-pull" and "image" in err.value.message and "镜像" in err.value.message
    assert "reg.example/lab:1" in err.value.log


def test_fake_api_quota_exceeded(settings: Settings, cluster: FakeCluster) -> None:
    cluster.quota_exceeded = True
    with pytest.raises(ProvisionError) as err:
        run(backend_for(settings, cluster).create(spec()))
    assert err.value.reason == "quota" and "quota" in err.value.message and "配额" in err.value.message


def test_fake_api_eviction_is_seen_and_a_new_pod_keeps_the_workspace(
    settings: Settings, cluster: FakeCluster
) -> None:
    b = backend_for(settings, cluster)
    ref = run(b.create(spec()))
    pvc_uid = cluster.objects[("persistentvolumeclaims", km.pvc_name("ev1-at1"))]["metadata"][
        "resourceVersion"
    ]
    cluster.set_pod_status(
        ref.infra_id,
        {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."},
    )
    status = run(b.status(ref))
    assert (
        status.state == EnvState.failed
        and "files are kept" in status.message
        and "文件已保留" in status.message
    )
    again = run(b.create(spec()))  # the instructor's Restart, or the attendee's next start
    assert run(b.status(again)).state == EnvState.ready
    assert cluster.count("POST", "pods") == 2
    pvc = cluster.objects[("persistentvolumeclaims", km.pvc_name("ev1-at1"))]
    assert pvc["metadata"]["resourceVersion"] == pvc_uid  # the same claim, never made again


def test_fake_api_unreachable_api_is_retried_through_backoff(
    settings: Settings, cluster: FakeCluster
) -> None:
    b = backend_for(settings, cluster)
    cluster.unavailable = 2  # two 503s, then the API answers: within the 3 attempts
    ref = run(b.create(spec()))
    assert run(b.status(ref)).state == EnvState.ready
    cluster.close()  # now nothing answers at all
    status = run(b.status(ref))
    assert (
        status.state == EnvState.failed
        and "does not answer" in status.message
        and "没有响应" in status.message
    )
    with pytest.raises(ProvisionError) as err:
        run(b.create(spec("ev1-at2")))
    assert err.value.reason == "api-down"


def test_fake_api_stop_keeps_the_pvc_destroy_removes_both(settings: Settings, cluster: FakeCluster) -> None:
    b = backend_for(settings, cluster)

    async def go() -> None:
        ref = await b.create(spec())
        await b.stop(ref)
        assert (await b.status(ref)).state == EnvState.stopped
        assert cluster.names("pods") == [] and cluster.names("persistentvolumeclaims") == [
            km.pvc_name("ev1-at1")
        ]
        ref = await b.create(spec())
        await b.destroy(ref)
        await b.destroy(ref)  # gone is success
        assert cluster.names("pods") == [] and cluster.names("persistentvolumeclaims") == []

    run(go())


def test_fake_api_warm_pool_gives_each_pod_to_one_attendee(settings: Settings, cluster: FakeCluster) -> None:
    b = backend_for(settings, cluster)
    template = spec("template", event_id=7)

    async def go() -> None:
        assert await b.prepare_event(7, template, 5) == 5
        refs = await asyncio.gather(*(b.create(spec(f"ev7-at{i}", event_id=7)) for i in range(30)))
        assert len({r.infra_id for r in refs}) == 30
        warm_used = [r for r in refs if r.infra_id.startswith("labserver-warm-")]
        assert len(warm_used) == 5
        found = {r.env_id: r.infra_id for r in await b.discover()}
        assert len(found) == 30 and all(found[r.env_id] == r.infra_id for r in refs)
        assert await b.prepare_event(7, template, 0) == 0

    run(go())
    assert cluster.count("POST", "pods") == 5 + 25


def test_fake_api_default_settings_select_this_backend(settings: Settings, tmp_path: Path) -> None:
    from labserver.backends import make_backend

    b = make_backend(settings.model_copy(update={"backend": "kubernetes"}))
    assert isinstance(b, KubernetesBackend) and b.name == "kubernetes"
