"""Where actors run: Ray start-up, per-role resources and placement groups, CPU threads and
CUDA devices.

Two placement groups hold a run's actors (``resources.client_placement`` and
``server_placement``): one bundle per client actor, SPREAD by default so the clients fan
out over the nodes, and one bundle per server plus the fed server, PACK by default so they
sit together on the nodes that have what they ask for (GPUs, when ``--server-gpus`` is set).
Reserving them first means a run that cannot fit fails before any actor starts, with the
bundles it asked for and what the cluster has (after ``placement_timeout_s``, which gives an
autoscaling cluster time to add nodes).

torch is imported inside the functions that use it: a run's driver imports this module before
it starts Ray, and torch's import (about 1.1 s) belongs on the set-up thread beside Ray's start
(``runtime.experiment``; docs/performance.md, section 6).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

from raysfl.config import STRATEGIES  # noqa: F401 - the choices, defined with the settings


def set_threads(cpus: float | None) -> None:
    """Give torch as many threads as the CPUs the actor was granted (at least one)."""
    import torch

    torch.set_num_threads(max(1, int(math.floor(cpus or 1))))


def configure_torch(cfg, cpus: float | None) -> None:
    """A process's torch settings for a run: its threads (:func:`set_threads`) and, with
    ``--deterministic``, deterministic kernels: ``torch.use_deterministic_algorithms`` (an
    operation without a deterministic implementation raises), cuDNN without autotuning, and
    cuBLAS's fixed workspace. On the CPU raysfl's runs are deterministic without it; on a GPU
    they are not, unless it is set (docs/reliability.md)."""
    import torch

    set_threads(cpus)
    deterministic = bool(getattr(cfg, "deterministic", False))
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call
    # set both ways: a pooled actor's next run must not inherit the last one's flags. Only when
    # it changes: the setter imports torch._inductor (1.3 s of CPU, 4 s in a cold start's actors)
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = deterministic


def device_for_actor(gpus: float, role: str | None = None) -> torch.device:
    """CUDA when this actor holds a real GPU share, else CPU (fake GPUs in tests fall back).

    On CUDA, a fractional share also bounds the process's CUDA memory (its caching allocator
    may take ``gpus`` of the device's memory), so actors sharing a GPU cannot starve each
    other. ``role`` given: an actor meant for a GPU that runs on the CPU says so once (one
    line, ``raysfl: warning: ...``)."""
    import torch

    if gpus <= 0:
        return torch.device("cpu")
    ids = []
    if torch.cuda.is_available():
        try:
            import ray

            ids = ray.get_gpu_ids()
        except Exception:  # noqa: BLE001 - outside an actor: no GPU ids
            ids = []
    if ids:
        if gpus < 1 and role is not None:
            torch.cuda.set_per_process_memory_fraction(float(gpus))
        return torch.device("cuda")
    if role is not None:
        import sys

        why = "Ray gave it no GPU" if torch.cuda.is_available() else "its node has no CUDA GPU"
        print(f"raysfl: warning: the {role} asked for {gpus:g} GPU but {why}; it runs on the CPU", file=sys.stderr,
              flush=True)
    return torch.device("cpu")


def cuda_count() -> int:
    """CUDA devices this process can use (0 without CUDA; CUDA_VISIBLE_DEVICES counts)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


INLINE_ENV = "RAY_max_direct_call_object_size"


CONNECT_TIMEOUT_S = 10.0  # how long a TCP connection to RAY_ADDRESS may take before it counts as unreachable


def check_ray_address(address: str | None = None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse a ``RAY_ADDRESS`` that cannot work, with one line, before Ray is asked to connect
    (Ray itself retries "Failed to connect to GCS" for minutes): a malformed address, a host
    that does not resolve, a port nothing listens on. ``auto`` and ``local`` are Ray's own and
    pass. A port that answers but is not a Ray cluster is not detected here."""
    from raysfl.errors import ConfigError, connect_error

    address = os.environ.get("RAY_ADDRESS") if address is None else address
    if not address or address.strip() in ("auto", "local"):
        return
    text = address.strip()
    rest, scheme = text, ""
    for prefix in ("ray://", "http://", "https://"):
        if rest.startswith(prefix):
            rest, scheme = rest[len(prefix):], prefix
            break
    rest = rest.rstrip("/")
    host, sep, port_s = rest.rpartition(":")
    host = host.strip("[]")
    allowed = ("allowed: HOST:PORT (the head node's GCS, e.g. 10.0.0.5:6379), ray://HOST:10001 (Ray Client), "
               "auto, or unset")
    if scheme.startswith("http"):
        raise ConfigError(f"RAY_ADDRESS={text!r} is a dashboard (job submission) address, which a driver cannot "
                          f"connect to: submit the run as a job (ray job submit --address {text} -- raysfl run "
                          f"...; the job gets its own RAY_ADDRESS), or set RAY_ADDRESS to the GCS HOST:6379 or "
                          f"ray://HOST:10001")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536 or "/" in host:
        raise ConfigError(f"RAY_ADDRESS={text!r} is not a Ray address; {allowed}")
    port = int(port_s)
    why = connect_error(host, port, timeout)
    if why is None:
        return
    if why.startswith("does not resolve"):
        raise ConfigError(f"RAY_ADDRESS={text!r}: host '{host}' {why}; {allowed}")
    raise ConfigError(f"RAY_ADDRESS={text!r}: no Ray cluster answers at {host}:{port} ({why}); "
                      f"{start_hint(scheme, port)}, or unset RAY_ADDRESS to run on a local Ray")


def start_hint(scheme: str, port: int) -> str:
    """How to start a head node that answers at ``port``: the Ray Client server for ``ray://``
    (Ray's default port 10001), the GCS otherwise."""
    if scheme == "ray://":
        return (f"a ray:// address is the head node's Ray Client server: start the head with "
                f"ray start --head --ray-client-server-port={port} (10001 by default)")
    return f"start a head node there (ray start --head --port={port})"


def init_ray(cfg, num_client_actors: int, num_servers: int) -> bool:
    """Connect to the cluster in RAY_ADDRESS, or start a local one sized for this run
    (:func:`_init_ray`). A SIGINT or SIGTERM meanwhile is raised once Ray is up (a second one at
    once): one that interrupted ``ray.init`` could leave the driver deadlocked in Ray's C++
    (runtime/interrupts.py)."""
    from raysfl.runtime import interrupts

    with interrupts.held(second_cuts_short=True):
        return _init_ray(cfg, num_client_actors, num_servers)


def _init_ray(cfg, num_client_actors: int, num_servers: int) -> bool:
    """Connect to the cluster in RAY_ADDRESS, or start a local one sized for this run.

    Returns True when this call started Ray. A Ray raysfl starts stays up for the later runs of
    the process (a warm federation: :mod:`raysfl.runtime.pool`) and is shut down when the
    process exits (:func:`shutdown_ray`, registered with ``atexit``; ``raysfl.shutdown()`` does
    it sooner). A local Ray gets a reaper (:mod:`raysfl.runtime.reaper`) that removes its
    processes if this driver dies without shutting it down.
    """
    import ray

    from raysfl.errors import ConfigError, first_line
    from raysfl.runtime import interrupts

    if ray.is_initialized():
        return False
    from raysfl.runtime import ray_noise, worker_logs

    ray_noise.hide_token_auth_line()
    if os.environ.get("RAY_ADDRESS"):
        check_ray_address()
        try:
            # a submitted job brings its own runtime_env (--working-dir); don't override it
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
            interrupts.reinstall()  # ray.init took SIGTERM over (and Ray's C-level stack dump under it)
        except (ConnectionError, ValueError, RuntimeError) as e:
            first = first_line(e, 200)
            raise ConfigError(f"cannot connect to the Ray cluster at RAY_ADDRESS={os.environ['RAY_ADDRESS']!r}: "
                              f"{first}") from None
        worker_logs.install()  # a crashed worker's noise becomes one line
        _at_exit()
        return True
    from raysfl.runtime import wire_guard

    r = cfg.resources
    # Ray's processes (raylet, then its workers) inherit the driver's environment when they
    # start: the workers find raysfl on PYTHONPATH and read the inline limit (a value the user
    # exported wins). Both are put back after, for later Rays and the driver's own children.
    # Not a runtime_env: its workers cannot be the ones Ray prestarts while it comes up, and six
    # actors took 0.9 s longer to start (benchmarks/process_floor.py). Only the wire guard's
    # hook (the test suite) needs one.
    env = wire_guard.runtime_env_hook() or None
    before = {k: os.environ.get(k) for k in (INLINE_ENV, "PYTHONPATH")}
    if before[INLINE_ENV] is None:
        os.environ[INLINE_ENV] = str(r.inline_object_kb * 1024)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_project_root(), before["PYTHONPATH"]]))
    need, need_gpus = actor_demand(cfg, num_client_actors, num_servers)
    num_cpus = r.num_cpus or max(os.cpu_count() or 1, math.ceil(need))
    num_gpus = r.num_gpus if r.num_gpus is not None else local_gpus(need_gpus)
    if need_gpus and not cuda_count():
        import sys

        print(f"raysfl: warning: the actors ask for {need_gpus:g} GPUs but this machine has no CUDA GPU; "
              "they run on CPU (Ray is given placeholder GPUs so they can be placed)", file=sys.stderr)
    try:
        # Ray's processes (and the reaper) start with SIGTERM blocked: `timeout`, a Ctrl-C'd
        # terminal or Slurm signal the whole process group, and the driver must outlive Ray's GCS
        # and raylet to record what it has (runtime/interrupts.py)
        with interrupts.children_spared(), loopback_only() as where:
            try:
                ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                         runtime_env=env, log_to_driver=True, configure_logging=False, **where)
            except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when its node does not come up
                raise start_failure(e) from None
            interrupts.reinstall()  # ray.init took SIGTERM over (and Ray's C-level stack dump under it)
            _start_reaper()
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    worker_logs.install()  # a crashed worker's noise becomes one line
    if wire_guard.enabled():
        wire_guard.install()
    _at_exit()
    return True


LOOPBACK = "127.0.0.1"
METRICS_ENV = "RAY_enable_metrics_collection"  # Ray's own switch (RayConfig), read by each of its processes


@contextmanager
def loopback_only():
    """Start a local Ray inside this, ``ray.init(address="local", ..., **where)`` with ``where``
    what it yields, and every process of it listens on the loopback interface only (GCS, raylet,
    workers, the driver, the dashboard agent, the autoscaler monitor), with no Prometheus export
    of metrics unless the user exported ``RAY_enable_metrics_collection=1`` (ours).

    Why: by default they all answer on every interface, without authentication, and the agent
    exports metrics there too; a run on one machine needs none of it reachable from elsewhere. Ray
    binds to loopback where its node IP is loopback, but on Linux ``ray.init`` turns a
    ``_node_ip_address`` of 127.0.0.1 into the machine's address unless its multi-node support is
    off (``ray_constants.ENABLE_RAY_CLUSTER``, read from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when
    Ray is imported, true on Linux); it is off while Ray starts and put back after, so a later
    connection to a cluster (``RAY_ADDRESS``) is untouched. The processes get the node IP from
    the driver. tests/test_local_binding.py checks the sockets of such a Ray."""
    from ray._private import ray_constants

    cluster = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    metrics = os.environ.get(METRICS_ENV)
    ray_constants.ENABLE_RAY_CLUSTER = False
    if metrics is None:  # inherited by the GCS and raylet, and from the raylet by its agents and workers
        os.environ[METRICS_ENV] = "0"
    try:
        yield {"_node_ip_address": LOOPBACK}
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = cluster
        if metrics is None:
            os.environ.pop(METRICS_ENV, None)


def start_failure(e: BaseException):
    """The one-line :class:`~raysfl.errors.RunFailed` for a local Ray that did not start: Ray's
    own first line, and what usually causes it -- a full disk, a file size limit (``ulimit -f``:
    Ray's logs and object store are files), a temp directory that cannot be written -- with the
    one of them that holds here where it can be seen cheaply, and Ray's session directory (its
    logs say which process failed). Ray itself says only "node timed out during startup", after
    half a minute or more."""
    import glob
    import resource
    import shutil

    from raysfl.errors import RunFailed, first_line

    first = first_line(e, 160)
    try:
        from ray._common.utils import get_default_ray_temp_dir

        temp = get_default_ray_temp_dir()
    except Exception:  # noqa: BLE001 - a Ray without it: its usual place
        temp = "/tmp/ray"
    # Ray names a session after its start time and the driver's pid: this process's newest one, not another Ray's
    ours = sorted(glob.glob(os.path.join(glob.escape(temp), f"session_*_{os.getpid()}")))
    session = ours[-1] if ours else None
    seen = []
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        seen.append(f"the file size limit is {soft // 1024} KiB (ulimit -f unlimited lifts it)")
    try:
        free = shutil.disk_usage(session or temp).free
        if free < 2**30:
            seen.append(f"{free / 2**20:.0f} MiB free under {session or temp}")
    except OSError:
        pass
    if not os.access(os.path.dirname(temp) or "/", os.W_OK) or (os.path.isdir(temp) and not os.access(temp, os.W_OK)):
        seen.append(f"{temp} is not writable")
    where = f"its session directory {session} (logs/ says which process failed)" if session else f"under {temp}"
    return RunFailed(f"the local Ray did not start ({first}); likely causes: the disk is full, a file size limit "
                     f"(ulimit -f), or {temp} not writable{'; here: ' + ', '.join(seen) if seen else ''}; see {where}")


_EXIT_HOOKED = []


def _at_exit() -> None:
    """Shut down the Ray raysfl started when the process exits (once)."""
    if not _EXIT_HOOKED:
        import atexit

        atexit.register(shutdown_ray)
        _EXIT_HOOKED.append(True)


def local_gpus(need_gpus: float) -> int | None:
    """GPUs to give a local Ray whose actors ask for ``need_gpus``: the whole GPUs they need, at
    most the machine's CUDA devices (Ray would hand out ids of GPUs that do not exist, on which
    actors silently run on the CPU); placeholders where the machine has none (the actors run on
    the CPU, with a warning); None (Ray's own detection) when no actor asks for a GPU."""
    if not need_gpus:
        return None
    have = cuda_count()
    return min(math.ceil(need_gpus), have) if have else math.ceil(need_gpus)


def _start_reaper() -> None:
    """Hand the local Ray's processes to the reaper: the ones Ray started for this driver,
    and the raylet's children (its agents and workers) as they appear."""
    try:
        import ray

        from raysfl.runtime import reaper

        node = ray._private.worker._global_node  # Ray's own record of the processes it started
        procs = {kind: [info.process.pid for info in infos if getattr(info, "process", None) is not None]
                 for kind, infos in node.all_processes.items()}
        reaper.start(sorted(pid for pids in procs.values() for pid in pids), procs.get("raylet", []))
    except Exception as e:  # noqa: BLE001 - without the reaper the run still works; say so once
        import sys

        print(f"raysfl: warning: no clean-up watchdog for the local Ray ({type(e).__name__}: {e}); if this "
              "process is killed, Ray's agents may linger for a minute", file=sys.stderr)


def shutdown_ray() -> None:
    """Shut down the Ray this process started (and the actors a warm federation keeps), then
    let its reaper go. Idempotent."""
    import ray

    from raysfl.runtime import pool, reaper

    if ray.is_initialized():
        pool.clear()
        _stop_with_sigkill()
        ray.shutdown()
    reaper.stop()


def _stop_with_sigkill() -> None:
    """The local Ray's processes run with SIGTERM blocked (``interrupts.children_spared``): the
    SIGTERM that ``ray.shutdown`` sends first would only cost a second per process before its
    SIGKILL, so it sends SIGKILL at once. A Ray this process joined has no such record: untouched."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    for infos in (getattr(node, "all_processes", None) or {}).values():
        for info in infos:
            proc = getattr(info, "process", None)
            if proc is not None and getattr(proc, "pid", None):
                proc.terminate = proc.kill


DEFAULT_CPUS = {"client": 0.5, "server": 1.0, "fed": 0.5}  # per actor, where the user sets none


def role_cpus(cfg, role: str) -> float:
    """CPUs one actor of ``role`` asks for: the user's setting, else the default."""
    v = getattr(cfg.resources, f"{role}_cpus")
    return DEFAULT_CPUS[role] if v is None else float(v)


def actor_demand(cfg, num_client_actors: int, num_servers: int) -> tuple[float, float]:
    """(CPUs, GPUs) the run's actors ask Ray for."""
    r = cfg.resources
    cpus = (num_client_actors * role_cpus(cfg, "client") + num_servers * role_cpus(cfg, "server")
            + role_cpus(cfg, "fed"))
    gpus = num_client_actors * r.client_gpus + num_servers * r.server_gpus + r.fed_gpus
    return cpus, gpus


def fit_resources(cfg, num_client_actors: int, num_servers: int, free_cpus: float):
    """``cfg`` with every per-role CPU share the user left unset made concrete: the default
    (0.5 client, 1 server, 0.5 fed) where the run fits the ``free_cpus`` of the cluster it
    joins, else those defaults scaled down alike until it does (fractional shares; Ray counts
    CPUs in steps of 1e-4). Shares the user set are kept as they are: a request that cannot
    fit still fails with its own message (check_capacity / reserve)."""
    import dataclasses

    r = cfg.resources
    counts = {"client": num_client_actors, "server": num_servers, "fed": 1}
    auto = [role for role in DEFAULT_CPUS if getattr(r, f"{role}_cpus") is None]
    if not auto:
        return cfg
    fixed = sum(counts[role] * role_cpus(cfg, role) for role in DEFAULT_CPUS if role not in auto)
    want = sum(counts[role] * DEFAULT_CPUS[role] for role in auto)
    room = free_cpus - fixed
    scale = 1.0 if want <= room or room <= 0 else room / want
    shares = {f"{role}_cpus": math.floor(DEFAULT_CPUS[role] * scale * 1e4) / 1e4 for role in auto}
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, **shares))


def resolve_direct_payloads(cfg, nodes: int | None = None):
    """``cfg`` with ``resources.direct_payloads`` "auto" made concrete for the cluster it runs on:
    "on" where it has more than one node (the driver then stays off the data path: smashed data
    goes from a client's node to its server's), "off" on one machine (returned through the
    driver, inline: the fastest there, docs/performance.md). ``nodes``: the cluster's alive
    nodes, where the caller has counted them (:func:`alive_nodes`)."""
    import dataclasses

    r = cfg.resources
    if r.direct_payloads != "auto":
        return cfg
    direct = "on" if (alive_nodes() if nodes is None else nodes) > 1 else "off"
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, direct_payloads=direct))


def resolve_snapshot_refs(cfg, nodes: int | None = None):
    """``cfg`` with ``resources.snapshot_refs`` "auto" made concrete (ours): "on" on one node where
    the clients' updates come back through the driver (``direct_payloads`` resolved "off"), "off"
    elsewhere. By reference, a snapshot of the clients' kept states is the very objects the client
    actors returned (:class:`raysfl.own_states.OwnManifest`); they live in the object store of the
    client actors' nodes, where a lost node would take the snapshot with it -- on one node the
    snapshot goes with the node either way. ``nodes``: as :func:`resolve_direct_payloads`."""
    import dataclasses

    r = cfg.resources
    if r.snapshot_refs != "auto":
        return cfg
    on = r.direct_payloads == "off" and (alive_nodes() if nodes is None else nodes) == 1
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, snapshot_refs="on" if on else "off"))


def resolve_device_payloads(cfg, nodes: int | None = None):
    """``cfg`` with ``resources.device_payloads`` "auto" made concrete: "on" where the client
    actors and the servers all hold shares of one GPU -- a one-node cluster with one GPU, and a
    GPU share asked for by both -- so that a CUDA tensor's IPC handle opens in the receiver
    (:func:`raysfl.transport.pack`); "off" otherwise. "on" where that does not hold is an error,
    since an IPC handle opens only on the GPU it came from. ``nodes``: as
    :func:`resolve_direct_payloads`."""
    import dataclasses

    import ray

    r = cfg.resources
    if r.device_payloads == "off":
        return cfg
    wants = r.client_gpus > 0 and r.server_gpus > 0
    gpus = ray.cluster_resources().get("GPU", 0.0) if wants or r.device_payloads == "on" else 0.0  # a call saved
    count = alive_nodes() if nodes is None else nodes
    shared = wants and count == 1 and gpus == 1
    if r.device_payloads == "on" and not shared:
        from raysfl.errors import ConfigError

        raise ConfigError(f"resources.device_payloads 'on' needs the client actors and the servers on one shared GPU "
                          f"(a one-node cluster with one GPU, client_gpus and server_gpus > 0); this run has "
                          f"{count} node(s), {gpus:g} GPU(s), client_gpus {r.client_gpus:g}, server_gpus "
                          f"{r.server_gpus:g}; use 'auto' or 'off'")
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, device_payloads="on" if shared else "off"))


def training_threads(cfg, num_client_actors: int, num_servers: int) -> int:
    """The torch threads a round's training keeps busy at most: each client actor's and
    server's (:func:`set_threads`: the floor of its CPUs, at least one)."""
    threads = lambda role: max(1, int(math.floor(role_cpus(cfg, role))))  # noqa: E731
    return num_client_actors * threads("client") + num_servers * threads("server")


def cores_and_counted() -> tuple[int, float]:
    """(the cores this process may run on, the CPUs this node's Ray counts)."""
    import ray

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores, ray.cluster_resources().get("CPU", 0.0)


def run_cores(cfg, num_client_actors: int, num_servers: int) -> float:
    """The cores of this one node that are the run's: all of them, scaled down where its Ray
    counts more CPUs than the node has cores (runs side by side, ``raysfl reproduce
    --parallel 2``) by the run's share of what Ray counts."""
    cores, counted = cores_and_counted()
    if not counted or counted <= cores:
        return float(cores)
    return actor_demand(cfg, num_client_actors, num_servers)[0] * cores / counted


def resolve_eval_overlap(cfg, num_client_actors: int, num_servers: int, nodes: int | None = None):
    """``cfg`` with ``resources.eval_overlap`` "auto" made concrete (ours): "on" on one node
    whose fed server has no GPU, "off" elsewhere. Evaluating a round while the next one trains
    (:mod:`raysfl.runtime.rounds`) took 0.87-0.94x of the round of evaluating at once on a
    2-core machine whose client actors and server keep both cores busy, and 0.69x with a core
    left over (docs/performance.md, section 10) -- on one thread: the evaluation then takes the
    cores the training leaves idle, at least one (:func:`resolve_eval_cpus`); on two threads
    there it took 1.26x, competing with the training. With a GPU for the fed server and on a
    cluster it is not measured, so "auto" leaves it off there. ``nodes``: as
    :func:`resolve_direct_payloads`."""
    import dataclasses

    r = cfg.resources
    if r.eval_overlap != "auto":
        return cfg
    on = not r.fed_gpus and (alive_nodes() if nodes is None else nodes) == 1
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, eval_overlap="on" if on else "off"))


def resolve_eval_cpus(cfg, num_client_actors: int, num_servers: int, nodes: int | None = None):
    """``cfg`` with ``resources.eval_cpus`` unset made concrete: the CPUs of the run's actors
    that wait while the fed server evaluates (ours). A round's evaluation comes after its
    aggregation, when every client actor and server is idle, so the fed server may use their
    CPUs for it: all of the run's on one node, the servers' and its own on a cluster (packed
    with it, ``server_placement``). Before, it evaluated on its own share (half a CPU: one
    thread) while the other cores sat idle (docs/performance.md, section 10).

    On one node whose Ray counts more CPUs than the machine has cores (``raysfl reproduce
    --parallel 2`` sizes its Ray for two runs at once), the share is scaled down alike, so that
    runs side by side do not evaluate on more threads than there are cores; the share is
    rounded to whole threads (a run on 2 cores whose Ray counts 3 CPUs: 2.5 x 2/3 -> 2).

    With ``--eval-overlap on`` (:func:`resolve_eval_overlap`) the other actors do not wait: they
    train the next round. The evaluation then takes the cores the training leaves idle on one
    node (at least one thread), and its own share on a cluster. ``nodes``: as
    :func:`resolve_direct_payloads`."""
    import dataclasses

    r = cfg.resources
    if r.eval_cpus is not None:
        return cfg
    one_node = (alive_nodes() if nodes is None else nodes) == 1
    if r.eval_overlap == "on":
        cpus = (math.floor(run_cores(cfg, num_client_actors, num_servers))
                - training_threads(cfg, num_client_actors, num_servers)) if one_node else role_cpus(cfg, "fed")
    elif one_node:
        cores, counted = cores_and_counted()
        cpus = actor_demand(cfg, num_client_actors, num_servers)[0] * min(1.0, cores / counted if counted else 1.0)
    else:
        cpus = num_servers * role_cpus(cfg, "server") + role_cpus(cfg, "fed")
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, eval_cpus=float(max(1, math.floor(cpus + 0.5)))))


@contextmanager
def threads_for(cpus: float | None):
    """torch's threads set to ``cpus`` (their floor, at least one) inside, and back after."""
    import torch

    before = torch.get_num_threads()
    want = max(1, int(math.floor(cpus or 1)))
    if want != before:
        torch.set_num_threads(want)
    try:
        yield
    finally:
        if want != before:
            torch.set_num_threads(before)


def alive_nodes() -> int:
    """Nodes of the Ray cluster this process is connected to that are alive."""
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def resolve_co_host(cfg, model_is_custom: bool, nodes: int | None = None):
    """``cfg`` with ``resources.co_host`` "auto" made concrete: "on" (the servers and the fed
    server in one process, :mod:`raysfl.runtime.role_host`) where that changes neither the
    results nor what a fault does -- the cluster has one node, the servers and the fed server
    ask for no GPU (a process has one CUDA memory share), no ``kill`` fault names one of them
    (it would end them all), and the model is one of the zoo's (a model of your own may draw
    from torch's random generator, e.g. dropout, which one process's roles would share);
    "off" otherwise. ``nodes``: as :func:`resolve_direct_payloads`."""
    import dataclasses

    from raysfl.faults import parse_faults, server_kills

    r = cfg.resources
    if r.co_host != "auto":
        return cfg
    on = ((alive_nodes() if nodes is None else nodes) == 1 and not r.server_gpus and not r.fed_gpus
          and not server_kills(parse_faults(cfg.faults)) and not model_is_custom)
    return dataclasses.replace(cfg, resources=dataclasses.replace(r, co_host="on" if on else "off"))


def check_capacity(cfg, num_client_actors: int, num_servers: int) -> None:
    """Fail fast (instead of waiting forever for actors) when the cluster is too small."""
    import ray

    from raysfl.errors import RunFailed

    cpus, gpus = actor_demand(cfg, num_client_actors, num_servers)
    have = ray.cluster_resources()
    for name, need in (("CPU", cpus), ("GPU", gpus)):
        if need > have.get(name, 0.0) + 1e-9:
            raise RunFailed(
                f"the actors need {need:g} {name}s ({num_client_actors} client actors, {num_servers} servers, "
                f"1 fed server) but the Ray cluster has {have.get(name, 0.0):g}; lower --client-{name.lower()}s/"
                f"--server-{name.lower()}s/--fed-{name.lower()}s or --client-actors, or add nodes")


def role_resources(cfg, role: str) -> dict[str, float]:
    """Ray resources of one actor of ``role`` (client, server, fed): CPU, GPU, memory (bytes)."""
    r = cfg.resources
    out = {"CPU": role_cpus(cfg, role), "GPU": getattr(r, f"{role}_gpus")}
    mem = getattr(r, f"{role}_memory_gb")
    if mem:
        out["memory"] = float(int(mem * 2**30))
    return {k: v for k, v in out.items() if v > 0}


def host_resources(cfg, num_servers: int) -> dict[str, float]:
    """Ray resources of the process that hosts the servers and the fed server
    (``--co-host``): what they would ask for as actors of their own, together."""
    out: dict[str, float] = {}
    for role, count in (("server", num_servers), ("fed", 1)):
        for k, v in role_resources(cfg, role).items():
            out[k] = out.get(k, 0.0) + count * v
    return out


def actor_options(resources: dict[str, float], pg=None, bundle: int = 0) -> dict:
    """``.options()`` for an actor with ``resources``, in bundle ``bundle`` of ``pg`` if given."""
    opts = {"num_cpus": resources.get("CPU", 0.0), "num_gpus": resources.get("GPU", 0.0)}
    if "memory" in resources:
        opts["memory"] = int(resources["memory"])
    if pg is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=False)
    return opts


def reserve(cfg, num_client_actors: int, num_servers: int, name: str):
    """Create the client and server placement groups and wait until the cluster holds them.

    Returns (client group or None, server group or None); None where the strategy is "none"
    or a role asks for no resources. Raises RunFailed, naming the bundles and the cluster's
    resources, when they are not placed within ``placement_timeout_s`` (the groups are
    removed again).
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from raysfl.errors import RunFailed

    r = cfg.resources
    client = role_resources(cfg, "client")
    servers = ([host_resources(cfg, num_servers)] if r.co_host == "on"
               else [role_resources(cfg, "server")] * num_servers + [role_resources(cfg, "fed")])
    groups, asked = [], []
    for label, bundles, strategy in (("client actors", [client] * num_client_actors, r.client_placement),
                                     ("servers + fed server", servers, r.server_placement)):
        if strategy == "none" or any(not b for b in bundles):
            groups.append(None)
            continue
        groups.append(placement_group(bundles, strategy=strategy, name=f"raysfl:{name}:{label.split()[0]}"))
        asked.append(f"{label}: {len(bundles)} x {_fmt(bundles[0])}"
                     + (f" + 1 x {_fmt(bundles[-1])}" if bundles[-1] != bundles[0] else "") + f" ({strategy})")
    pending = [g for g in groups if g is not None]
    ready, _ = ray.wait([g.ready() for g in pending], num_returns=len(pending), timeout=r.placement_timeout_s)
    if len(ready) < len(pending):
        for g in pending:
            remove_placement_group(g)
        raise RunFailed(f"the Ray cluster cannot hold the run's actors within {r.placement_timeout_s:g} s; asked "
                        f"for {'; '.join(asked)}; the cluster has {_fmt(ray.cluster_resources())}; lower the "
                        "per-role resources (--client-cpus, --server-gpus, ...) or --client-actors, relax "
                        "--client-placement/--server-placement, add nodes, or raise --placement-timeout-s")
    return groups[0], groups[1]


def actor_location() -> dict:
    """Where the calling actor runs: Ray node id and address, the GPU ids Ray gave it, and the
    torch device it computes on (written to the run's ``placement.json``)."""
    import ray

    ctx = ray.get_runtime_context()
    node = ctx.get_node_id()
    ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node), None)
    gpus = [str(g) for g in ray.get_gpu_ids()]
    return {"node_id": node, "node_ip": ip, "gpu_ids": gpus, "device": str(device_for_actor(1.0 if gpus else 0.0))}


def _fmt(res: dict) -> str:
    parts = []
    for k in ("CPU", "GPU", "memory"):
        if res.get(k):
            parts.append(f"{res[k] / 2**30:.3g} GB memory" if k == "memory" else f"{res[k]:g} {k}")
    return "{" + ", ".join(parts) + "}"


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
