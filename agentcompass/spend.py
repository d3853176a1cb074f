"""What an attempt may spend, what a run may pay, and the ledger they are drawn from.

**Limits** (``execution.limits``) bound each stage of each attempt: its model calls, prompt, completion and
total tokens, and their cost at ``model.pricing``. They are checked where every call passes, before it is
sent: the model client (``chat``, ``tool_agent``, a dataset's judge) and the model gateway (every agent
that runs as a program of its own). A call made once a limit is reached is refused (``LimitReachedError``
in the client; an HTTP 400 in the agent's protocol from the gateway), and the stage ends the attempt with
the ``limit`` class, keeping what it did (its trajectory, usage and outputs). A limit is checked before a
call, and a call's tokens are known only after it: one call may go past a limit, never two. Limits count
every call answered, those of the call cache too, so a replay makes the decisions the first run made.

**Budgets** bound what is paid: ``execution.budget`` a request's, over every run of it, and
``runtime.budget`` one invocation's, over all its requests. Every call sent (never one the cache
answered) under a budget is charged to its request's ledger, a small file in the run folder (``spend.json``),
and, with a run budget, to the invocation's; the ledger is replaced whole under ``flock``, so every job, shard and
cluster job that shares the results filesystem draws from the same one, with no server. Once a budget is
spent no new attempt starts (its first stages, ``prepare`` and ``run``, do not begin); attempts in flight
finish, because an attempt stopped halfway is money spent on nothing: its result could not be scored
and a rerun would pay for its calls again. So a run may pay more than its budget by at most what the
attempts in flight spend after it ran out: fewer than (attempt jobs at once) x (the most one attempt
spends, ``execution.limits`` when set). Attempts not started stay missing, and the run ends with exit
status 5, saying what was paid and how many attempts wait; the same command with a larger budget goes
on from there and pays for nothing twice.
"""

from __future__ import annotations

import contextvars
import fcntl
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from agentcompass._util.logs import LOG
from agentcompass.errors import LimitReachedError
from agentcompass.runtime.models.request import BudgetSpec, LimitsSpec

# the request's ledger, in its run folder; the lock beside it serializes the charges
LEDGER = "spend.json"
_LOCK_SUFFIX = ".lock"
# the invocation's ledger (runtime.budget): made by the outer run, its path handed down to every job
INVOCATION_LEDGER_ENV = "AGENTCOMPASS_SPEND_LEDGER"
# the most of a ledger file read: a larger one is no ledger this module wrote
_LEDGER_BYTES = 4096
_AMOUNTS = ("cost_usd", "prompt_tokens", "completion_tokens", "calls")
# dollars below a dollar are written with at least _DECIMALS decimals, and as many as _SIGNIFICANT
# significant digits need, down to a billionth (_COST_DIGITS, as cost_usd rounds)
_COST_DIGITS, _DECIMALS, _SIGNIFICANT = 9, 4, 4

_UNWRITABLE: list[str] = []  # the first ledger a charge could not write, said once per process

ATTEMPT_SPEND: contextvars.ContextVar["AttemptSpend | None"] = contextvars.ContextVar("attempt_spend", default=None)


def dollars(value: float | None, absent: str = "-", signed: bool = False) -> str:
    """An amount of US dollars as every message and view says it (``results.dollars``: the run's last line,
    the report, ``runs``, ``compare``): cents from a dollar up (``$1,234.56``); below, four decimals, or as
    many as four significant digits need (``$0.0123``, ``$0.001435``, ``$0.000057``: a cheap attempt's cost
    is not $0.0001). ``absent`` for None (no prices declared); ``signed``: a difference, ``+$0.0012``."""
    if value is None:
        return absent
    sign = "-" if value < 0 else "+" if signed else ""
    size = abs(value)
    if size >= 1:
        return f"{sign}${size:,.2f}"
    decimals = _DECIMALS if size == 0 else \
        min(_COST_DIGITS, max(_DECIMALS, _SIGNIFICANT - 1 - math.floor(math.log10(size))))
    text = f"{size:.{decimals}f}"
    cut = len("0.") + _DECIMALS  # the zeros past four significant digits go, never the first four decimals
    return f"{sign}${text[:cut]}{text[cut:].rstrip('0')}"


def amount(name: str, value: float) -> str:
    return dollars(value) if name == "cost_usd" else f"{value:,.0f}"


def cost_usd(prompt_tokens: float, completion_tokens: float, pricing: Mapping[str, float] | None) -> float | None:
    """What the tokens cost at ``pricing`` ({input_per_million, output_per_million}); None without prices: the one
    place tokens become dollars (``results.paid_and_saved`` and the limits and budgets read it)."""
    if not pricing:
        return None
    cost = (prompt_tokens * pricing["input_per_million"] + completion_tokens * pricing["output_per_million"]) / 1e6
    return round(cost, 9)  # to a billionth of a dollar: no float noise such as 0.0005700000000000001


def cost_of(prompt_tokens: float, completion_tokens: float, pricing: Mapping[str, float] | None) -> float:
    """``cost_usd``, 0 without prices."""
    return cost_usd(prompt_tokens, completion_tokens, pricing) or 0.0


# --- the ledger ---------------------------------------------------------------------------------------


@dataclass
class Spent:
    """What a ledger holds: paid dollars, tokens and calls."""

    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def get(self, name: str) -> float:
        return float(getattr(self, name))


class Ledger:
    """A running total of what was paid, shared by every process that uses ``path``.

    A charge takes ``path``'s lock (``flock`` on the file beside it), reads the total, and replaces the
    file whole (written aside, then renamed): a reader never sees half a total, and a process killed
    mid-charge loses at most that charge. What is not a ledger (a link, a huge or unreadable file) reads as
    nothing spent and is replaced at the next charge.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> Spent:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return Spent()
        try:
            data = json.loads(os.read(fd, _LEDGER_BYTES + 1)[:_LEDGER_BYTES])
        except (OSError, ValueError):
            return Spent()
        finally:
            os.close(fd)
        if not isinstance(data, dict):
            return Spent()
        values: dict[str, float] = {}
        for name in _AMOUNTS:
            value = data.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < float("inf"):
                return Spent()
            values[name] = value
        return Spent(float(values["cost_usd"]), int(values["prompt_tokens"]), int(values["completion_tokens"]),
                     int(values["calls"]))

    def add(self, cost_usd: float, prompt_tokens: int, completion_tokens: int) -> Spent:
        """Charge one call; the new total."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(str(self.path) + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            spent = self.read()
            spent = Spent(round(spent.cost_usd + cost_usd, 9), spent.prompt_tokens + prompt_tokens,
                          spent.completion_tokens + completion_tokens, spent.calls + 1)
            data = json.dumps({**{name: getattr(spent, name) for name in _AMOUNTS},
                               "total_tokens": spent.total_tokens, "updated": time.time()}).encode()
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.unlink(missing_ok=True)  # a leftover of a killed charge, or whatever was planted there
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)  # a link in its place is replaced, never followed
            return spent
        finally:
            os.close(lock)  # also releases the lock


def request_ledger(run_folder: str | Path) -> Ledger:
    return Ledger(Path(run_folder) / LEDGER)


def invocation_ledger() -> Ledger | None:
    """The invocation's ledger, when its outer run set one up (``runtime.budget``)."""
    path = os.environ.get(INVOCATION_LEDGER_ENV)
    return Ledger(path) if path else None


def start_invocation_ledger(workdir: str | Path, invocation: str) -> None:
    """The outer run's: a new ledger for this invocation, its path handed to every job it starts."""
    folder = Path(workdir) / ".snakemake" / "agentcompass" / "spend"
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[INVOCATION_LEDGER_ENV] = str((folder / f"{invocation}.json").resolve())


def end_invocation_ledger() -> None:
    os.environ.pop(INVOCATION_LEDGER_ENV, None)


def _spent_of(budget: BudgetSpec, spent: Spent) -> tuple[str, float, float] | None:
    """The first amount of ``budget`` that ``spent`` reached: (name, budget, spent)."""
    for name in ("cost_usd", "total_tokens"):
        limit = getattr(budget, name)
        if limit is not None and spent.get(name) >= limit:
            return name, limit, spent.get(name)
    return None


def over_budget(request_budget: BudgetSpec | None, run_folder: str | Path, run_budget: BudgetSpec | None,
                request_name: str = "") -> str | None:
    """Why no new attempt of the request may start (a budget it draws from is spent), or None."""
    if request_budget is not None:
        reached = _spent_of(request_budget, request_ledger(run_folder).read())
        if reached is not None:
            name, limit, spent = reached
            return (f"the budget of request {request_name!r} (execution.budget.{name}: {amount(name, limit)}) is "
                    f"spent: {amount(name, spent)} paid")
    ledger = invocation_ledger() if run_budget is not None else None
    if ledger is not None and run_budget is not None:
        reached = _spent_of(run_budget, ledger.read())
        if reached is not None:
            name, limit, spent = reached
            return f"the run's budget (runtime.budget.{name}: {amount(name, limit)}) is spent: {amount(name, spent)} paid"
    return None


def budget_lines(budget: BudgetSpec | None, run_folder: str | Path) -> list[str]:
    """What ``status`` says of a request's budget: each amount, what its ledger holds of it, and whether the next
    run would start any attempt."""
    if budget is None:
        return []
    spent = request_ledger(run_folder).read()
    lines = []
    for name in ("cost_usd", "total_tokens"):
        limit = getattr(budget, name)
        if limit is None:
            continue
        paid = spent.get(name)
        state = ("spent: the next run starts no attempt; raise it to continue" if paid >= limit
                 else f"{amount(name, limit - paid)} left")
        lines.append(f"budget: {amount(name, paid)} of {amount(name, limit)} paid (execution.budget.{name}, "
                     f"{LEDGER}): {state}")
    return lines


# --- one attempt's stage --------------------------------------------------------------------------------


class AttemptSpend:
    """One stage of one attempt: its limits, checked before each model call, and the ledgers each call it
    pays for is charged to. The model client and the gateway find it in ``ATTEMPT_SPEND``."""

    def __init__(self, limits: LimitsSpec | None, pricing: Mapping[str, float] | None,
                 ledgers: Sequence[Ledger] = (), stage: str = "run") -> None:
        self.limits = limits.set() if limits is not None else {}
        self.pricing = pricing
        self.ledgers = tuple(ledgers)
        self.stage = stage
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        self.reached: str | None = None  # the first refusal's message, once a call was refused
        self.limit: str | None = None
        self.refused = 0  # calls refused (or withheld): an agent may go on calling once refused
        self._lock = threading.Lock()

    def spent(self, name: str) -> float:
        if name == "calls":
            return self.calls
        if name == "cost_usd":
            return cost_of(self.prompt_tokens, self.completion_tokens, self.pricing)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}[name]

    def check(self, answered: bool = False) -> None:
        """Raise ``LimitReachedError`` when the call about to be made is refused (a limit is reached), or, with
        ``answered``, when the call just answered went past one: its reply is withheld. Usage may reach a limit,
        never pass it."""
        if not self.limits:
            return
        for name, limit in self.limits.items():
            spent = self.spent(name)
            if spent > limit if answered else spent >= limit:
                what = "the reply that went past it is withheld" if answered else "the model call is refused"
                message = (f"execution.limits.{name} ({amount(name, limit)}) is reached: this attempt's {self.stage} "
                           f"stage has used {amount(name, spent)}, so {what} and the attempt ends with the limit "
                           "class")
                with self._lock:
                    self.refused += 1
                    if self.reached is None:
                        self.reached, self.limit = message, name
                error = LimitReachedError(message)
                error.limit = name
                raise error

    def charge(self, prompt_tokens: int, completion_tokens: int, *, paid: bool) -> None:
        """One call answered (``paid``: sent, not answered from the call cache)."""
        with self._lock:
            self.calls += 1
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
        if paid and self.ledgers:
            cost = cost_of(prompt_tokens, completion_tokens, self.pricing)
            for ledger in self.ledgers:
                try:
                    ledger.add(cost, prompt_tokens, completion_tokens)
                except OSError as exc:  # the call stands: a ledger that cannot be written is said, once
                    if not _UNWRITABLE:
                        _UNWRITABLE.append(str(ledger.path))
                        LOG.warning(f"the spend ledger {ledger.path} cannot be written ({exc}): what this run pays "
                                    "is not counted there, so a budget may be passed")

    def as_metadata(self) -> dict[str, Any]:
        """What a result records of the limit that ended it."""
        return {"limit": self.limit, "limit_value": self.limits.get(self.limit or ""),
                "spent": self.spent(self.limit) if self.limit else None, "refused_calls": self.refused}
