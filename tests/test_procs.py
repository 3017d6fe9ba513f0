"""The helpers of the tests that start processes (tests/procs.py)."""

from __future__ import annotations

from .procs import PORT_HALF, free_port


def test_a_free_port_is_handed_out_once():
    """Ports are picked before anything binds them: the kernel's next free port may be one
    handed out a moment ago, and two servers of one fixture would then race for it. Two
    thousand picks hold several such repeats when nothing prevents them."""
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_free_port_is_of_this_processs_half(monkeypatch):
    """`./dev test`'s two pytest processes each take ports of their own half alone, so the
    kernel handing one's port to the other too cannot make their servers race for it."""
    for half in (0, 1):
        monkeypatch.setenv(PORT_HALF, str(half))
        assert {free_port() // 2 % 2 for _ in range(50)} == {half}
