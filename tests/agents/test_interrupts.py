"""Signal handling of long jobs: GracefulStop (train, compare) and RaiseOnSignals (probe), in this process."""

from __future__ import annotations

import signal

import pytest

from creditgym.agents.train.interrupts import GracefulStop, RaiseOnSignals


def _deliver(signum: signal.Signals) -> None:
    """Send ``signum`` to this process: its Python handler has run when this returns (``signal.raise_signal``,
    whose handler runs before the call returns)."""
    signal.raise_signal(signum)


def test_graceful_stop_asks_first_and_interrupts_on_the_second_signal() -> None:
    before = signal.getsignal(signal.SIGTERM)
    heard: list[int] = []
    with GracefulStop(on_request=heard.append) as stop:
        _deliver(signal.SIGTERM)
        assert stop.requested and heard == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_raise_on_signals_raises_even_where_sigint_was_ignored(signum: signal.Signals) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a script
    try:
        with pytest.raises(KeyboardInterrupt, match=signum.name), RaiseOnSignals():
            _deliver(signum)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # put back as it was
    finally:
        signal.signal(signal.SIGINT, previous)
