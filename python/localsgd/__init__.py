"""localsgd: Local SGD over a localsgd coordinator, with Accelerate's LocalSGD interface.

Your training loop changes by two lines (docs/python.md):

    with localsgd.LocalSGD(model=model, local_sgd_steps=8) as local_sgd:
        for batch in loader:
            ...; loss.backward(); optimizer.step(); optimizer.zero_grad()
            local_sgd.step()

Where to connect comes from arguments or the environment (LOCALSGD_COORDINATOR,
LOCALSGD_TOKEN_FILE, LOCALSGD_TLS_CA, LOCALSGD_TLS_CERT, LOCALSGD_TLS_KEY), the ranks from
torchrun's or srun's variables. Client is the operator's API (start, stop, status, runs, watch,
fetch_model). Errors raise localsgd.Error (RunEnded, InvalidArgument) with the coordinator's
message.
"""

import itertools
import json
import queue
import threading

import torch

from . import _C
from ._C import Error, InvalidArgument, RunEnded

__all__ = ["Client", "Error", "InvalidArgument", "LocalSGD", "RunEnded", "placement", "shard"]

# Enum fields that may be given without their prefix: codec="bf16", exchange="sharded".
_ENUM_PREFIXES = {"codec": "CODEC_", "exchange": "EXCHANGE_"}
_WATCH_IDS = itertools.count(1)  # Client.watch: each watch's id, to cancel it


def _spec_json(fields):
    """RunSpec fields (a dict, proto field names) as the JSON the native side parses."""
    spec = {}
    for name, value in fields.items():
        if value is None:
            continue
        prefix = _ENUM_PREFIXES.get(name)
        if prefix and isinstance(value, str) and not value.upper().startswith(prefix):
            value = prefix + value.upper()
        spec[name] = value
    return json.dumps(spec) if spec else ""


def placement():
    """This process's ranks from the environment, without connecting: a dict with rank,
    world_size, local_rank and local_world_size (one process: 0 of 1)."""
    return _C.placement()


def shard(dataset, rank=None, world_size=None):
    """This rank's part of a map-style dataset: samples rank, rank + world_size, ... (the
    worker's split). rank and world_size default to placement()'s."""
    if rank is None or world_size is None:
        where = placement()
        rank = where["rank"] if rank is None else rank
        world_size = where["world_size"] if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise InvalidArgument(f"rank: {rank} is not in [0, world_size {world_size})")
    return torch.utils.data.Subset(dataset, range(rank, len(dataset), world_size))


def _model_tensors(model):
    """The model's parameters, and its float buffers (averaged when the run says
    average_buffers): all float32."""
    params = list(model.parameters())
    buffers = [b for b in model.buffers() if b.is_floating_point()]
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.is_floating_point() and tensor.dtype != torch.float32:
            raise InvalidArgument(f"{name}: localsgd averages float32 tensors, this is "
                                  f"{tensor.dtype}")
    if not params:
        raise InvalidArgument("model: it has no parameters to average")
    return params, buffers


class LocalSGD:
    """Averages `model` with every other copy in the run every local_sgd_steps optimizer steps,
    in place (Accelerate's LocalSGD, over a localsgd coordinator).

    Joins when made: waits for the operator's run (or, with start_run=True, global rank 0
    starts one from local_sgd_steps and the other keyword arguments, RunSpec fields such as
    total_steps, codec="bf16", overlap_steps, fragments), and takes the run's model. Every
    RunSpec field given (local_sgd_steps included) must be the run's, else it raises
    Error naming the field; local_sgd_steps=None takes the run's. enabled=False never
    communicates. Float buffers (batch-norm statistics) are averaged too when the run says
    average_buffers (average_buffers=True expects that of the run).

    step() after each optimizer.step(); it counts optimizer steps. With an `accelerator`
    (Accelerate's Accelerator, or an object with its `sync_gradients`), step() may be called
    for every micro-batch inside `accelerator.accumulate(model)`, as Accelerate's own loop
    does: only the calls where `accelerator.sync_gradients` is true (the optimizer stepped)
    count. A model wrapped for DistributedDataParallel (accelerator.prepare) has its gradient
    all-reduce turned off inside the `with` block (model.no_sync(), as Accelerate's LocalSGD
    does), and the wrapped module is averaged. It raises RunEnded once the run was stopped or
    ended without this rank. Leaving the `with` block (or close()) syncs one last time so
    every copy ends equal, and leaves; an exception leaves without that sync, with its name as
    the reason.

    In a paced run (the run's round_seconds; docs/design.md, "Paced rounds") when to sync is
    the run's decision: each node trains as many optimizer steps between rounds as its speed
    allows, and step() moves `steps` on to the run's next round step when it syncs;
    round_steps fixes this node's number instead (every rank of a node gives the same).
    """

    def __init__(self, accelerator=None, model=None, local_sgd_steps=None, enabled=True, *,
                 average_buffers=None, coordinator=None, token_file=None, tls_ca=None,
                 tls_cert=None, tls_key=None, node_name=None, node_key_file=None,
                 rendezvous_dir=None, checkpoint_dir=None, connect_timeout=None,
                 round_steps=None, start_run=False, **spec):
        if model is None and isinstance(accelerator, torch.nn.Module):
            model, accelerator = accelerator, None  # LocalSGD(model, 8)
        if not isinstance(model, torch.nn.Module):
            raise InvalidArgument("model: a torch.nn.Module is needed")
        if accelerator is not None and not hasattr(accelerator, "sync_gradients"):
            raise InvalidArgument(
                f"accelerator: a {type(accelerator).__name__} has no sync_gradients: pass "
                "Accelerate's Accelerator (its sync_gradients says which step() calls end an "
                "optimizer step), or leave it out and call step() once per optimizer step")
        self._accelerator = accelerator
        # DistributedDataParallel (what accelerator.prepare makes of a model on several
        # processes): its per-step all-reduce is what Local SGD replaces.
        self._ddp = model if hasattr(model, "no_sync") and hasattr(model, "module") else None
        self._no_sync = None
        if self._ddp is not None:
            model = self._ddp.module
        if local_sgd_steps is not None and local_sgd_steps < 1:
            raise InvalidArgument(f"local_sgd_steps: {local_sgd_steps} must be >= 1")
        self.model = model
        self.enabled = enabled
        self._steps = 0
        self._replica = None
        if not enabled:
            self._closed = True
            return
        expect = dict(spec, local_sgd_steps=local_sgd_steps, average_buffers=average_buffers)
        start = ""
        if start_run:
            start = _spec_json(dict({"model": {"custom": type(model).__name__}}, **expect))
        connection = dict(coordinator=coordinator, token_file=token_file, tls_ca=tls_ca,
                          tls_cert=tls_cert, tls_key=tls_key, node_name=node_name,
                          node_key_file=node_key_file, rendezvous_dir=rendezvous_dir,
                          checkpoint_dir=checkpoint_dir,
                          connect_timeout=None if connect_timeout is None else str(connect_timeout),
                          round_steps=None if round_steps is None else str(round_steps))
        params, buffers = _model_tensors(model)
        self._replica = _C.Replica.connect(params, buffers, connection, start, _spec_json(expect))
        self._closed = False

    def __enter__(self):
        if self._ddp is not None and self.enabled:
            self._no_sync = self._ddp.no_sync()
            self._no_sync.__enter__()
        return self

    def __exit__(self, exc_type, exc, traceback):
        if self._no_sync is not None:
            self._no_sync.__exit__(exc_type, exc, traceback)
            self._no_sync = None
        if exc_type is None:
            self.close()
        elif issubclass(exc_type, KeyboardInterrupt):
            self._leave("stopped: interrupted (KeyboardInterrupt)")
        elif issubclass(exc_type, RunEnded):
            self._leave(f"stopped: {exc}")
        else:
            self._leave(f"failed: {exc_type.__name__}: {exc}", failed=True)
        return False

    def step(self):
        """Counts one optimizer step; at the run's boundaries the copies average (the GIL is
        released meanwhile). With an accelerator, a call inside accelerator.accumulate on a
        micro-batch that did not step the optimizer counts nothing."""
        if self._accelerator is not None and not self._accelerator.sync_gradients:
            return
        if self._replica is None:
            self._steps += 1
            return
        self._replica.step()

    def report(self, loss=None, accuracy=None, samples=0):
        """For the status page: the latest training loss, a test accuracy (a fraction in
        [0, 1]), and how many samples were trained since the last report (for samples/s).
        Raises InvalidArgument, naming it, for an accuracy outside [0, 1] or not finite and
        for a negative `samples`."""
        if self._replica is not None:
            self._replica.report(float(loss) if loss is not None else 0.0,
                                 float(accuracy) if accuracy is not None else -1.0, int(samples))

    def close(self, wait=60.0):
        """The last sync, the final report, and leaving (at most `wait` seconds as a member
        while the run ends). Idempotent."""
        if not self._closed:
            self._closed = True
            self._replica.finish(wait)

    def _leave(self, reason, failed=False):
        if not self._closed:
            self._closed = True
            self._replica.leave(reason, failed)

    @property
    def steps(self):
        """Optimizer steps counted (a rank that joined a run in progress starts at its step)."""
        return self._replica.steps if self._replica is not None else self._steps

    @property
    def syncs(self):
        return self._replica.syncs if self._replica is not None else 0

    @property
    def spec(self):
        """The run's spec (a dict; defaults filled in)."""
        return self._replica.spec if self._replica is not None else {}

    @property
    def local_sgd_steps(self):
        return self.spec.get("local_sgd_steps")

    @property
    def run_id(self):
        return self._replica.run_id if self._replica is not None else ""

    @property
    def worker_id(self):
        return self._replica.worker_id if self._replica is not None else ""

    def _where(self, key):
        return getattr(self._replica, key) if self._replica is not None else placement()[key]

    rank = property(lambda self: self._where("rank"), doc="Global rank, for sharding data.")
    world_size = property(lambda self: self._where("world_size"), doc="Ranks in the job.")
    local_rank = property(lambda self: self._where("local_rank"))
    local_world_size = property(lambda self: self._where("local_world_size"))


class Client:
    """The coordinator's operator API: start and stop runs, read the status and the runs,
    watch the status, fetch a run's model. Arguments default to the environment
    (LOCALSGD_COORDINATOR, LOCALSGD_TOKEN_FILE, LOCALSGD_TLS_CA/_CERT/_KEY). Starting and
    stopping need the token."""

    def __init__(self, address=None, token_file=None, tls_ca=None, tls_cert=None,
                 tls_key=None, timeout=10.0):
        connection = dict(coordinator=address, token_file=token_file, tls_ca=tls_ca,
                          tls_cert=tls_cert, tls_key=tls_key)
        self._client = _C.Client(connection, float(timeout))

    def start(self, spec=None, **fields):
        """Starts a run: `spec` a dict of RunSpec fields or a text-format RunSpec, and/or
        fields as keyword arguments. Returns the run (a dict)."""
        if isinstance(spec, str):
            spec = json.loads(_C.spec_text_to_json(spec))
        return self._client.start(_spec_json(dict(spec or {}, **fields)) or "{}")

    def stop(self, reason="", run_id=""):
        """Stops `run_id` (default: the active run). Returns the run."""
        return self._client.stop(run_id, reason)

    def status(self):
        """The coordinator's status: the run, its members, rounds and events (a dict)."""
        return self._client.status()

    def runs(self):
        """The runs this coordinator knows, newest first (a list of dicts)."""
        return self._client.runs()

    def watch(self, interval=1.0):
        """Yields the status at once, then at most every `interval` seconds while it changes,
        until the caller stops iterating."""
        statuses = queue.Queue()
        stop = threading.Event()
        watch_id = next(_WATCH_IDS)

        def on_status(status):
            statuses.put(status)
            return not stop.is_set()

        def run():
            try:
                self._client.watch(float(interval), on_status, watch_id)
                statuses.put(None)
            except Exception as error:  # noqa: BLE001 - handed to the caller
                statuses.put(error)

        watcher = threading.Thread(target=run, daemon=True)
        watcher.start()
        try:
            while True:
                item = statuses.get()
                if item is None:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            # The stream may see no status again (a run that ended): end it now, so that no
            # thread is left in gRPC when the interpreter exits.
            stop.set()
            self._client.cancel_watch(watch_id)
            watcher.join(timeout=10)

    def fetch_model(self, run_id="", into=None):
        """A run's committed global model (default: the active or last run): a dict with
        run_id, round, global_step, values (a flat float32 tensor in the order of the
        model's parameters) and source (the node leaders it came from, checked by digest, or
        "the coordinator"). With `into` (a module), also copies it into its parameters."""
        model = self._client.fetch_model(run_id)
        if into is not None:
            params = list(into.parameters())
            count = sum(p.numel() for p in params)
            if count != model["values"].numel():
                raise InvalidArgument(f"into: the module has {count} values, the run's model "
                                      f"{model['values'].numel()}")
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(model["values"].to(params[0].device), params)
        return model
