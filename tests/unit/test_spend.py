"""agentcompass.spend: the ledger shared by processes, what it makes of what is not a ledger, the limits'
two checks, and when a budget is spent."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from agentcompass import spend
from agentcompass.errors import LimitReachedError
from agentcompass.runtime.models.codec import ContractError
from agentcompass.runtime.models.request import BudgetSpec, LimitsSpec

PRICING = {"input_per_million": 100.0, "output_per_million": 500.0}  # 10 + 2 tokens: $0.002


def _charge(path: str, times: int) -> None:
    ledger = spend.Ledger(path)
    for _ in range(times):
        ledger.add(0.002, 10, 2)


def test_charges_from_processes_at_once_all_count(tmp_path: Path):
    path = str(tmp_path / "run" / spend.LEDGER)
    workers = [multiprocessing.get_context("fork").Process(target=_charge, args=(path, 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * 4
    spent = spend.Ledger(path).read()
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (200, 2000, 400)
    assert spent.cost_usd == pytest.approx(0.4)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [spend.LEDGER, spend.LEDGER + ".lock"]


@pytest.mark.parametrize("planted", ["link", "garbage", "huge", "negative", "list", "folder"])
def test_what_is_no_ledger_reads_as_nothing_spent_and_is_replaced(tmp_path: Path, planted: str):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"cost_usd": 99.0, "prompt_tokens": 1, "completion_tokens": 1, "calls": 1}))
    path = tmp_path / spend.LEDGER
    if planted == "link":
        path.symlink_to(outside)
    elif planted == "garbage":
        path.write_bytes(b"\xff{not json")
    elif planted == "huge":
        path.write_text(json.dumps({"cost_usd": 1.0, "prompt_tokens": 1, "completion_tokens": 1, "calls": 1,
                                    "pad": "x" * 10_000}))
    elif planted == "negative":
        path.write_text(json.dumps({"cost_usd": -5.0, "prompt_tokens": 1, "completion_tokens": 1, "calls": 1}))
    elif planted == "list":
        path.write_text("[1, 2]")
    else:
        path.mkdir()
    ledger = spend.Ledger(path)
    assert ledger.read() == spend.Spent()
    if planted == "folder":
        with pytest.raises(OSError):
            ledger.add(0.002, 10, 2)
        return
    assert ledger.add(0.002, 10, 2).calls == 1
    assert not path.is_symlink() and json.loads(path.read_text())["calls"] == 1
    assert json.loads(outside.read_text())["cost_usd"] == 99.0  # a link is replaced, never written through


def test_a_planted_link_at_the_temporary_name_is_not_written_through(tmp_path: Path):
    import threading

    outside = tmp_path / "outside"
    outside.write_text("mine")
    path = tmp_path / spend.LEDGER
    (tmp_path / f".{spend.LEDGER}.{os.getpid()}.{threading.get_ident()}.tmp").symlink_to(outside)
    spend.Ledger(path).add(0.002, 10, 2)
    assert outside.read_text() == "mine" and spend.Ledger(path).read().calls == 1


def test_a_limit_may_be_reached_never_passed():
    limited = spend.AttemptSpend(LimitsSpec(total_tokens=24), PRICING)
    limited.check()
    limited.charge(10, 2, paid=True)
    limited.check(answered=True)  # 12 of 24
    limited.check()
    limited.charge(10, 2, paid=False)  # a cached call counts: a replay decides as the first run did
    limited.check(answered=True)  # exactly 24: reached, not passed
    with pytest.raises(LimitReachedError) as refused:
        limited.check()  # the next call is refused before it is sent
    assert refused.value.limit == "total_tokens" and "execution.limits.total_tokens (24)" in str(refused.value)
    assert limited.reached is not None and limited.as_metadata() == {"limit": "total_tokens", "limit_value": 24,
                                                                     "spent": 24, "refused_calls": 1}


def test_the_call_that_goes_past_a_dollar_limit_is_withheld():
    limited = spend.AttemptSpend(LimitsSpec(cost_usd=0.003), PRICING, stage="evaluate")
    limited.charge(10, 2, paid=True)
    limited.check(answered=True)  # $0.002
    limited.charge(10, 2, paid=True)
    with pytest.raises(LimitReachedError) as past:
        limited.check(answered=True)  # $0.004
    assert "reply that went past it is withheld" in str(past.value) and "evaluate stage" in str(past.value)


def test_only_calls_sent_are_charged_to_the_ledgers(tmp_path: Path):
    ledger = spend.Ledger(tmp_path / spend.LEDGER)
    limited = spend.AttemptSpend(None, PRICING, [ledger])
    limited.charge(10, 2, paid=False)
    limited.charge(10, 2, paid=True)
    assert ledger.read().calls == 1 and ledger.read().cost_usd == pytest.approx(0.002)


def test_a_budget_is_spent_once_its_ledger_reaches_it(tmp_path: Path, monkeypatch):
    run = tmp_path / "run"
    assert spend.over_budget(BudgetSpec(cost_usd=0.004), run, None, "r") is None
    spend.request_ledger(run).add(0.002, 10, 2)
    assert spend.over_budget(BudgetSpec(cost_usd=0.004), run, None, "r") is None
    spend.request_ledger(run).add(0.002, 10, 2)
    why = spend.over_budget(BudgetSpec(cost_usd=0.004), run, None, "r")
    assert why == "the budget of request 'r' (execution.budget.cost_usd: $0.0040) is spent: $0.0040 paid"
    assert spend.over_budget(BudgetSpec(total_tokens=25), run, None, "r") is None
    # the invocation's ledger, from the environment its outer run set
    spend.start_invocation_ledger(tmp_path, "inv1")
    invocation = spend.invocation_ledger()
    assert invocation is not None and Path(os.environ[spend.INVOCATION_LEDGER_ENV]).parent.name == "spend"
    monkeypatch.setenv(spend.INVOCATION_LEDGER_ENV, str(invocation.path))
    invocation.add(1.5, 1000, 0)
    assert spend.over_budget(None, run, BudgetSpec(cost_usd=1.0), "r") == (
        "the run's budget (runtime.budget.cost_usd: $1.00) is spent: $1.50 paid")


@pytest.mark.parametrize("spec, message", [
    (lambda: LimitsSpec(total_tokens=0), "execution.limits.total_tokens must be a number above 0"),
    (lambda: LimitsSpec(calls=2.5), "LimitsSpec.calls must be int or null"),
    (lambda: BudgetSpec(), "a budget must give cost_usd, total_tokens or both"),
    (lambda: BudgetSpec(cost_usd=float("inf")), "budget.cost_usd must be a number above 0"),
])
def test_bad_limits_and_budgets_are_refused(spec, message):
    with pytest.raises(ContractError, match=message.replace(".", r"\.")):
        spec()
