"""The refusal of a resource limit an environment cannot enforce, saying where the limit came from and the fix."""

from __future__ import annotations

from agentcompass.errors import ConfigError


class LimitsUnavailableError(ConfigError):
    """A limit the environment cannot enforce here: refused, never run without it.

    ``limits`` names the params refused (``memory``, ``cpus``, ``pids_limit``) and ``alternatives`` the fixes
    that keep them. Where the session is opened, ``with_origin`` says which of them the task set
    (``from_task``: each one, and what set it) and which the user did, and the fix for each; until then the
    message gives both.
    """

    def __init__(self, problem: str, limits: tuple[str, ...] = (), alternatives: str = "", *,
                 from_task: dict[str, str] | None = None, env_id: str = "") -> None:
        self.problem, self.limits, self.alternatives = problem, tuple(limits), alternatives
        super().__init__(self._message(from_task, env_id))

    def with_origin(self, from_task: dict[str, str], env_id: str) -> "LimitsUnavailableError":
        return LimitsUnavailableError(self.problem, self.limits, self.alternatives, from_task=from_task, env_id=env_id)

    def _message(self, from_task: dict[str, str] | None, env_id: str) -> str:
        if not self.limits:
            return self.problem
        alternatives = [self.alternatives] if self.alternatives else []
        if from_task is None:  # not known yet: either
            nulls = ", ".join(f"`{name}: null`" for name in self.limits)
            return (f"{self.problem}. Fix: {'; or '.join(alternatives + [''])}run without {_names(self.limits)}: "
                    f"leave {_them(self.limits)} out of the environment's params or, where the task sets "
                    f"{_them(self.limits)} (as a task folder's task.toml [environment] may), set {nulls} in "
                    "the request's environment params")
        mine = [name for name in self.limits if name not in from_task]
        theirs = [name for name in self.limits if name in from_task]
        origins, fixes = [], []
        if mine:
            origins.append(f"{_names(mine)} set in the environment's params")
            fixes.append(f"remove {_names(mine)} from the environment's params")
        if theirs:
            origins += [f"{name} set by the task ({from_task[name]})" for name in theirs]
            nulls = ", ".join(f"{name}: null" for name in theirs)
            fixes.append(f"set `{nulls}` in the request's environment params (`environment: {{id: {env_id}, "
                         f"params: {{{nulls}}}}}`, or `environments: {{{env_id}: {{{nulls}}}}}`) to run the task "
                         f"without {_them(theirs)}")
        return f"{self.problem}; {'; '.join(origins)}. Fix: {'; or '.join(fixes + alternatives)}"


def _them(limits) -> str:
    return "it" if len(list(limits)) == 1 else "them"


def _names(limits) -> str:
    limits = list(limits)
    return limits[0] if len(limits) == 1 else ", ".join(limits[:-1]) + " and " + limits[-1]
