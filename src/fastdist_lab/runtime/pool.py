"""``ProcessGroupPool`` and ``Distributed``: real process groups for every named dim, gloo or NCCL; and
``build_layout``, what ``Cluster.apply`` runs on every rank (its groups built and checked, no communication).

A port of the pool of ServiceNow's Fast-LLM (commit 91b28fab, ``fast_llm/engine/distributed/distributed.py``):
rendezvous through one store without ``init_process_group``, one ``PrefixStore`` per group, one group per distinct
member list, every generator (and torch's default CPU generator) seeded from ``fastdist_lab.seeds.generator_seeds``.
Two bugs of the original are not reproduced: member lists are hashed as tuples, and a ``range`` and a ``tuple`` with
the same members are the same group. Groups come into being in ``ProcessGroupPool.create_group`` alone, which a pool
of another kind of group overrides; a group that cannot be made raises one ``ClusterError`` naming it.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed

from ..config import DIM_NAMES, DistributedBackend, DistributedConfig, DistributedDim, PhaseType, check_ranks_in_range
from ..errors import BackendUnavailable, ClusterError
from ..formatting import first_line, members_text
from ..layout import Layout
from ..seeds import generator_seeds
from .backends import check_nccl
from .expert_groups import attach_expert_groups, dim_members, expert_members, identity_problems
from .members import GroupRecord, group_prefix, layout_groups, member_tuple

logger = logging.getLogger(__name__)

ProcessGroup = Any
"""A torch.distributed backend object (``ProcessGroupGloo`` / ``ProcessGroupNCCL``) or ``None`` for size 1."""

LOOPBACK = "127.0.0.1"
GLOO_KEY = "0/{}"
"""The key (under the group's prefix) where torch's ``ProcessGroupGloo`` leaves a member's rendezvous value: its
device index, then its group rank (torch 2.13; pinned by ``tests/runtime/test_pool.py``)."""


_default_pool: ProcessGroupPool | None = None


class ProcessGroupPool:
    """One rank's pool of process groups: one store, at most one group per distinct ordered member list.

    ``store`` may be given (any c10d store: a ``FileStore``, a connected ``TCPStore``); otherwise ``init_method``
    (``env://`` by default, as under torchrun) is used for the rendezvous when ``world_size > 1``. ``gloo_hostname``
    pins gloo's transport to one address (``"127.0.0.1"`` for a local cluster); ``None``: gloo picks from the host.
    """

    def __init__(
        self,
        rank: int | None = None,
        world_size: int | None = None,
        local_world_size: int | None = None,
        timeout: float = 60,
        use_cpu: bool = False,
        init_method: str = "env://",
        backend: DistributedBackend | str = DistributedBackend.nccl,
        *,
        store: Any = None,
        gloo_hostname: str | None = None,
    ):
        self._rank = DistributedConfig.default_rank() if rank is None else rank
        self._world_size = DistributedConfig.default_world_size() if world_size is None else world_size
        self._local_world_size = (
            DistributedConfig.default_local_world_size() if local_world_size is None else local_world_size
        )
        self._timeout = float(timeout)
        self._use_cpu = use_cpu
        self._backend = DistributedBackend.parse(backend)
        self._gloo_hostname = gloo_hostname
        self._gloo_device: list[Any] | None = None
        self._process_groups: dict[tuple[int, ...], ProcessGroup] = {}
        self._creations: dict[tuple[int, ...], int] = {}
        self._records: dict[int, tuple[ProcessGroup, GroupRecord]] = {}
        self.created_seconds: dict[tuple[int, ...], float] = {}
        """Seconds spent creating each group, keyed by its member tuple."""
        self.created_count = 0
        """How many groups this pool has created so far."""
        self.changes = 0
        """How many times this pool began to create or release groups (an interrupted change leaves it counted)."""
        self.store: Any = None

        if self._use_cpu:
            if self._backend == DistributedBackend.nccl and self._world_size > 1:
                raise BackendUnavailable(
                    "the NCCL backend cannot run on CPU with more than one rank; use the gloo backend", "nccl"
                )
            self._device = torch.device("cpu")
        else:
            check_nccl(self._local_world_size)
            torch.cuda.init()
            self._device = torch.device("cuda", self._rank % self._local_world_size)
            torch.cuda.set_device(self._device)

        if self._world_size > 1:
            if store is not None:
                self.store = store
            else:
                if self._rank == 0:
                    logger.info("Initializing TCP store.")
                # No init_process_group: the groups are built directly on a store.
                self.store, _, _ = next(
                    torch.distributed.rendezvous(
                        init_method, self._rank, self._world_size, timeout=datetime.timedelta(seconds=self._timeout)
                    )
                )

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world_size

    @property
    def local_world_size(self) -> int:
        """Ranks per node."""
        return self._local_world_size

    @property
    def device(self) -> torch.device:
        """The device tensors of this rank live on (``cpu`` or ``cuda:<local rank>``)."""
        return self._device

    @property
    def backend(self) -> DistributedBackend:
        """The backend every group of this pool uses."""
        return self._backend

    @property
    def groups(self) -> dict[tuple[int, ...], ProcessGroup]:
        """The groups created so far, keyed by member tuple (a copy)."""
        return dict(self._process_groups)

    def _gloo_devices(self) -> list[Any]:
        """gloo transport devices: the pinned host, else ``GLOO_SOCKET_IFNAME``'s interfaces, else the default."""
        gloo = torch.distributed.ProcessGroupGloo
        if self._gloo_hostname:
            return [gloo.create_device(hostname=self._gloo_hostname)]
        interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name.strip()]
        if interfaces:
            return [gloo.create_device(interface=name.strip()) for name in interfaces]
        return [gloo.create_default_device()]

    @property
    def default_cpu_generator(self) -> torch.Generator:
        """The generator ``Distributed`` seeds as torch's default CPU generator: this process's own one (a simulated
        rank, one of many in one process, has a generator of its own instead)."""
        return torch.random.default_generator

    def canonical(self, value: Any) -> Any:
        """The object this pool keeps for ``value`` (a member tuple or a group name): ``value`` itself. (The pools of a
        simulated world share one object per distinct value: thousands of ranks in one process hold one copy.)"""
        return value

    def record_of(self, group: ProcessGroup) -> GroupRecord | None:
        """How this pool created ``group`` (``None`` for an object it did not create, or released)."""
        entry = self._records.get(id(group))
        return entry[1] if entry is not None and entry[0] is group else None

    def create_group(self, members: tuple[int, ...], group_rank: int, name: str) -> ProcessGroup:
        """Create the group of ``members`` (this rank being ``group_rank`` in it), its store keys under ``name``: the
        one place where groups come into being (a pool of another kind of group overrides this alone)."""
        store = torch.distributed.PrefixStore(name + "/", self.store)
        timeout = datetime.timedelta(seconds=self._timeout)
        try:
            # torch names the gloo options, their timeout and devices privately; they are the only way to set them.
            if self._backend == DistributedBackend.gloo:
                kind = torch.distributed.ProcessGroupGloo
                if self._gloo_device is None:
                    self._gloo_device = self._gloo_devices()
                options = kind._Options()  # noqa: SLF001
                options._devices = self._gloo_device  # noqa: SLF001
            else:
                kind = torch.distributed.ProcessGroupNCCL
                options = kind.Options()
                options.is_high_priority_stream = False
            options._timeout = timeout  # noqa: SLF001
            options.global_ranks_in_group = list(members)
            options.group_name = name
            return kind(store, group_rank, len(members), options)
        except Exception as error:  # gloo and NCCL throw whatever their parsers hit (bad_alloc, _M_create, ...)
            raise ClusterError(
                f"rank {self._rank} could not create the {self._backend.value} group {name!r} of ranks "
                f"{members_text(members)}: {first_line(error)} (a member failed, or the rendezvous values in the "
                "store were not the ones the members wrote)"
            ) from error

    def get_process_group(self, global_ranks: range | tuple[int, ...], group_rank: int) -> ProcessGroup | None:
        """The group of ``global_ranks`` (this rank being ``group_rank`` in it), created on first request; ``None`` for
        a group of one. Equal member sequences share one group whatever their type."""
        members = member_tuple(global_ranks)
        if not 0 <= group_rank < len(members) or members[group_rank] != self._rank:
            raise ClusterError(f"rank {self._rank} is not member {group_rank} of group {list(members)}")
        check_ranks_in_range(global_ranks if isinstance(global_ranks, range) else members, 0, self._world_size)
        if len(members) == 1:
            return None
        group = self._process_groups.get(members)
        if group is None:
            members = self.canonical(members)
            version = self._creations.get(members, 0)
            begin = time.perf_counter()
            # A group released and created again gets a fresh name: its old store keys must not be seen again.
            name = self.canonical(group_prefix(members, global_ranks) + (f"_v{version}" if version else ""))
            self.changes += 1
            group = self.create_group(members, group_rank, name)
            self.created_seconds[members] = time.perf_counter() - begin
            self._records[id(group)] = (group, GroupRecord(members, group_rank, name))
            self._creations[members] = version + 1
            self._process_groups[members] = group
            self.created_count += 1
        return group

    def release_groups(self, keep: Iterable[Sequence[int]]) -> int:
        """Shut down and forget every group whose members are not in ``keep``; returns how many went. Every member of a
        group must release it at the same point (as when all ranks apply the same layouts in the same order); a
        released group asked for again is created afresh under a new store prefix."""
        kept = {member_tuple(members) for members in keep}
        released = [members for members in self._process_groups if members not in kept]
        self.changes += bool(released)
        in_use = {id(group) for key, group in self._process_groups.items() if key in kept}
        for members in released:
            group = self._process_groups.pop(members)
            if id(group) in in_use:  # the same object is still held under a kept member list
                continue
            entry = self._records.pop(id(group), None)
            try:
                group.shutdown()
            except Exception as error:  # peers may already have closed their side
                logger.debug("group shutdown failed: %s", error)
            if entry is not None:
                self._forget_rendezvous(entry[1])
        return len(released)

    def _forget_rendezvous(self, record: GroupRecord) -> None:
        """Delete this rank's rendezvous value of a released gloo group from the store: every member read it before
        the group existed anywhere, and a store file would otherwise keep it (in every rank's memory) for good."""
        if self._backend != DistributedBackend.gloo or self.store is None:
            return
        try:
            torch.distributed.PrefixStore(record.name + "/", self.store).delete_key(GLOO_KEY.format(record.group_rank))
        except Exception as error:  # a store without deletions (a fake one), or one that is gone
            logger.debug("rendezvous key not deleted: %s", error)

    def __enter__(self) -> ProcessGroupPool:
        global _default_pool
        if _default_pool is not None:
            raise RuntimeError("another ProcessGroupPool is already the default pool")
        _default_pool = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _default_pool
        if _default_pool is self:
            _default_pool = None
        self.shutdown()

    def shutdown(self) -> None:
        """Shut every group down (idempotent); the pool holds no group afterwards."""
        groups, self._process_groups = list(self._process_groups.values()), {}
        self._records.clear()
        for group in groups:
            try:
                group.shutdown()
            except Exception as error:  # a group whose peers already died may refuse; nothing more to do
                logger.debug("group shutdown failed: %s", error)

    def close(self) -> None:
        """Shut the groups down and drop the store connection."""
        self.shutdown()
        self.store = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()


_GROUP_ATTRIBUTES: dict[str, str] = {name: f"{name}_group" for name in DIM_NAMES}
"""Dim name -> attribute of ``Distributed`` holding its group."""


class Distributed:
    """One rank's process groups for every named dim, and its seeded random generators.

    Uses the default pool (``with pool:``) or ``pool`` when given, else creates its own pool from the config.
    Generators are seeded with ``fastdist_lab.seeds.generator_seeds(config, step, phase)``. A group of another size or
    group rank than its dim raises (as in Fast-LLM), or with ``strict=False`` is left unattached (``mismatched``).
    """

    def __init__(
        self,
        config: DistributedConfig,
        use_cpu: bool = False,
        *,
        pool: ProcessGroupPool | None = None,
        strict: bool = True,
    ):
        if config.reference_config is not None:
            raise ClusterError("Distributed needs an original config, not a copy referring to another one")
        self._config = config
        pool = pool if pool is not None else _default_pool
        self._local_pool = pool is None
        if pool is None:
            sizes = (config.rank, config.world_size, config.local_world_size, config.timeout)
            pool = ProcessGroupPool(*sizes, use_cpu, backend=config.backend)
        else:
            problems = []
            if pool.world_size < config.world_size:
                problems.append(f"pool world_size {pool.world_size} < config world_size {config.world_size}")
            if pool.rank != config.rank:
                problems.append(f"pool rank {pool.rank} != config rank {config.rank}")
            if pool.local_world_size < config.local_world_size:
                problems.append(
                    f"pool local_world_size {pool.local_world_size} < config local_world_size {config.local_world_size}"
                )
            if pool.device.type != ("cpu" if use_cpu else "cuda"):
                problems.append(f"pool device {pool.device.type} but use_cpu={use_cpu}")
            if pool.backend != config.backend:
                problems.append(f"pool backend {pool.backend.value} != config backend {config.backend.value}")
            if problems:
                raise ClusterError("the pool does not fit the config: " + "; ".join(problems))
        self._pool = pool
        self._strict = strict
        self.mismatched: list[str] = []
        """Dims whose group has another size or group rank than the dim (only with ``strict=False``)."""
        self.group_seconds: dict[str, float] = {}
        """Seconds each dim spent getting its group (near zero when it reused an existing one)."""
        self.group_created: dict[str, bool] = {}
        """Whether each dim's group was newly created (``False`` when reused from the pool or of size 1)."""
        self.expert_groups: dict[str, ProcessGroup | None] = {}
        """The expert dims' groups, when a layout with experts attached them (``runtime.expert_groups``)."""

        for name in DIM_NAMES:
            setattr(self, _GROUP_ATTRIBUTES[name], self.add_group(config.distributed_dims[name]))

        config.log_first_rank("Setting random seeds...")
        seeds = generator_seeds(config, 0, PhaseType.training)
        # torch's default CPU generator too (only needed to match Megatron's initialization).
        self.default_cpu_generator = pool.default_cpu_generator
        self.default_cpu_generator.manual_seed(seeds["default_cpu"])
        self.pp_generator = torch.Generator(device=self.device)
        self.tp_generator = torch.Generator(device=self.device)
        self.pp_init_generator = torch.Generator(device=self.device).manual_seed(seeds["pp_init"])
        self.tp_init_generator = torch.Generator(device=self.device).manual_seed(seeds["tp_init"])
        self.set_step(0, PhaseType.training)

    @property
    def config(self) -> DistributedConfig:
        """The config these groups were built for."""
        return self._config

    @property
    def pool(self) -> ProcessGroupPool:
        """The pool the groups come from."""
        return self._pool

    @property
    def device(self) -> torch.device:
        """The pool's device."""
        return self._pool.device

    def group(self, name: str) -> ProcessGroup | None:
        """The group of dim ``name``, dense or expert (``None`` when the dim has size 1)."""
        return self.expert_groups[name] if name in self.expert_groups else getattr(self, _GROUP_ATTRIBUTES[name])

    def add_group(self, distributed_dim: DistributedDim) -> ProcessGroup | None:
        """Get the group of ``distributed_dim`` from the pool and attach it to the dim."""
        self._config.log_first_rank(f"Initializing group {distributed_dim.name}, size={distributed_dim.size}...")
        distributed_dim.check_ranks_in_range(0, self._config.world_size)
        count = self._pool.created_count
        begin = time.perf_counter()
        group = self._pool.get_process_group(distributed_dim.global_ranks, distributed_dim.rank)
        self.group_seconds[distributed_dim.name] = time.perf_counter() - begin
        self.group_created[distributed_dim.name] = self._pool.created_count != count
        wrong = group is not None and (group.size(), group.rank()) != (distributed_dim.size, distributed_dim.rank)
        if wrong and not self._strict:
            self.mismatched.append(distributed_dim.name)
        else:
            distributed_dim.setup(group)
        return group

    def set_step(self, step: int, phase: PhaseType | str) -> None:
        """Reseed the pipeline and tensor generators for ``step`` of ``phase``."""
        seeds = generator_seeds(self._config, step, PhaseType.parse(phase))
        self.pp_generator.manual_seed(seeds["pp"])
        self.tp_generator.manual_seed(seeds["tp"])

    def shutdown(self) -> None:
        """Shut the pool down if this instance created it."""
        if self._local_pool:
            self._pool.shutdown()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()


# ----------------------------------------------------------------------------------------------- apply
def _seeds(distributed: Distributed) -> dict[str, Any]:
    """Compare each generator's initial seed with ``generator_seeds(config)`` (valid right after construction)."""
    expected = generator_seeds(distributed.config)
    actual = {name: int(getattr(distributed, f"{name}_generator").initial_seed()) for name in expected}
    return {"seeds_ok": actual == expected, "seeds": {k: str(v) for k, v in actual.items()}}


def rank_identity(distributed: Distributed, layout: Layout) -> dict[str, Any]:
    """Each dim's group (``layout.group_dims``: the expert dims too when it has experts, ``runtime.expert_groups``) as
    this rank's pool holds it, checked against ``layout`` without communication (config's members, the group object's
    size and group rank, the pool created that very object for those members), and the generators' seeds. A
    JSON-ready dict: ``rank``, ``dims`` (per dim: ``dim``, ``size``, ``group_rank``, ``created``, ``create_seconds``
    and, only when something is wrong, ``identity``: the problems), ``seeds_ok`` and ``seeds``."""
    config = distributed.config
    groups = layout_groups(layout)
    rows = []
    for name in layout.group_dims:
        members, index, positions = groups[name]
        expected, position = members[index[config.rank]], positions[config.rank]
        row: dict[str, Any] = {
            "dim": name,
            "size": len(expected),
            "group_rank": dim_members(distributed, layout, name)[1],
            "created": distributed.group_created.get(name, False),
            "create_seconds": distributed.group_seconds.get(name, 0.0),
        }
        problems = identity_problems(distributed, name, expected, position, layout)
        if problems:
            row["identity"] = problems
        rows.append(row)
    return {"rank": config.rank, "dims": rows, **_seeds(distributed)}


def build_layout(ctx: Any, layout: Layout) -> dict[str, Any]:
    """What ``Cluster.apply`` runs on this rank: build ``Distributed`` for ``layout`` from the rank's pool (on the
    pool's device), with the expert dims' groups when the layout has experts, and check each dim's group as the pool
    holds it (``rank_identity``, kept in ``ctx.identity``, the ``rank_loop.RankContext``). Keeps the groups of this
    layout and of the previous one in the pool (switching back and forth stays instant); the rest go, so exploring
    many layouts does not pile up sockets and threads (every member of a group decides the same way: all ranks apply
    the same layouts in the same order)."""
    previous, previous_layout = ctx.config, ctx.layout
    ctx.layout = ctx.config = ctx.distributed = ctx.identity = None
    config = layout.config(ctx.rank)
    use_cpu = ctx.pool is None or ctx.pool.device.type == "cpu"
    distributed = Distributed(config, use_cpu=use_cpu, pool=ctx.pool, strict=False)  # a wrong group: one dim fails
    attach_expert_groups(distributed, layout)
    ctx.layout, ctx.config, ctx.distributed = layout, config, distributed
    identity = rank_identity(distributed, layout)
    if ctx.pool is not None:
        kept = (config, previous) if previous is not None else (config,)
        experts = expert_members(layout, ctx.rank) + expert_members(previous_layout, ctx.rank)
        ctx.pool.release_groups([dim.global_ranks for held in kept for dim in held.distributed_dims.values()] + experts)
    ctx.identity = identity
    return identity
