"""The exercises that run the student's code on real ranks (4 gloo processes, one tensor group of all four): a ring
all-reduce written with send and receive, column- and row-parallel linears; right code passes, wrong code gets a
hint naming the rank."""

from __future__ import annotations

import pytest

import fastdist_lab as fdl
from fastdist_lab import exercises as ex
from fastdist_lab.errors import WrongAnswer


@pytest.fixture(scope="module")
def four():
    with fdl.LocalCluster(4, backend="gloo", timeout=60, progress=False) as cluster:
        cluster.apply(fdl.Layout(world_size=4, tensor_parallel=4))
        yield cluster


def ring(tensor, group):
    """A ring all-reduce: reduce-scatter then all-gather, p - 1 steps each, one chunk per step."""
    import torch

    p, r = group.size(), group.rank()
    chunks = list(torch.tensor_split(tensor, p))
    for step in range(p - 1):  # after step s, chunk (r - s - 1) holds s + 2 ranks' sum
        send, receive = (r - step) % p, (r - step - 1) % p
        incoming = torch.empty_like(chunks[receive])
        work = group.send([chunks[send].clone()], (r + 1) % p, 0)
        group.recv([incoming], (r - 1) % p, 0).wait()
        work.wait()
        chunks[receive] += incoming
    for step in range(p - 1):  # chunk (r + 1) is complete: pass the complete chunks around
        send, receive = (r + 1 - step) % p, (r - step) % p
        incoming = torch.empty_like(chunks[receive])
        work = group.send([chunks[send].clone()], (r + 1) % p, 0)
        group.recv([incoming], (r - 1) % p, 0).wait()
        work.wait()
        chunks[receive].copy_(incoming)
    tensor.copy_(torch.cat(chunks))


def half_ring(tensor, group):
    """Only the reduce-scatter phase: every rank holds one complete chunk."""
    import torch

    p, r = group.size(), group.rank()
    chunks = list(torch.tensor_split(tensor, p))
    for step in range(p - 1):
        send, receive = (r - step) % p, (r - step - 1) % p
        incoming = torch.empty_like(chunks[receive])
        work = group.send([chunks[send].clone()], (r + 1) % p, 0)
        group.recv([incoming], (r - 1) % p, 0).wait()
        work.wait()
        chunks[receive] += incoming
    tensor.copy_(torch.cat(chunks))


def test_a_ring_all_reduce_passes(four, capsys):
    ex.check_ring_all_reduce(four, ring)
    assert capsys.readouterr().out.startswith("correct: your ring gives torch's all-reduce on all 4 ranks")


@pytest.mark.parametrize(
    ("wrong", "says"),
    [(half_ring, "check which chunk"), (lambda tensor, group: None, "unchanged"),
     (lambda tensor, group: 1 / 0, "rank 0 raised: ZeroDivisionError"), (..., "replace")],
)  # fmt: skip
def test_a_wrong_ring_gets_a_hint(four, wrong, says):
    with pytest.raises(WrongAnswer, match=says):
        ex.check_ring_all_reduce(four, wrong)


def test_a_ring_that_waits_forever_is_reported_not_hung(four):
    def deaf(tensor, group):
        import torch

        incoming = torch.empty_like(tensor)
        group.recv([incoming], (group.rank() - 1) % group.size(), 0).wait()  # nobody sends

    with pytest.raises(WrongAnswer, match="matching receive"):
        ex.check_ring_all_reduce(four, deaf, timeout=5)
    ex.check_ring_all_reduce(four, ring)  # fresh workers: the layout is applied again


def column(x, weight_shard, group):
    return x @ weight_shard.T


def row(x_shard, weight_shard, group):
    import torch.distributed as dist

    partial = x_shard @ weight_shard.T
    dist.all_reduce(partial, group=group)
    return partial


def test_parallel_linears(four, capsys):
    ex.check_column_parallel(four, column)
    ex.check_row_parallel(four, row)
    ex.check_parallel_mlp(four, column, row)
    assert capsys.readouterr().out.count("correct: ") == 3
    with pytest.raises(WrongAnswer, match="partial sum"):
        ex.check_row_parallel(four, lambda x, w, group: x @ w.T)  # no all-reduce
    with pytest.raises(WrongAnswer, match="shape"):
        ex.check_column_parallel(four, lambda x, w, group: x)
