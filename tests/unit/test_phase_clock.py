"""A step's phase clock sums each phase's time and runs, and starts again from zero once taken."""

import time

import pytest

from pipeline_src.steps.phase_clock import PhaseClock


def test_each_phase_sums_its_runs_and_a_take_starts_again_from_zero():
    clock = PhaseClock()
    for _ in range(3):
        with clock.timing("decoder_step"):
            time.sleep(0.001)
    with clock.timing("prefill"):
        pass
    totals = clock.take()
    assert totals["decoder_step"].runs == 3 and totals["decoder_step"].seconds >= 0.003
    assert totals["prefill"].runs == 1
    assert clock.take() == {}


def test_a_phase_that_raises_is_still_timed():
    clock = PhaseClock()
    with pytest.raises(RuntimeError), clock.timing("execute"):
        raise RuntimeError("the batch failed")
    assert clock.take()["execute"].runs == 1
