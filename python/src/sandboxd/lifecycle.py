"""A sandbox's lifecycle (the Orbiter sandbox): its states and the transitions allowed between them."""

from __future__ import annotations

from enum import StrEnum

from .errors import SandboxError


class SandboxStatus(StrEnum):
    """SandboxStatus is a sandbox's lifecycle state (the Orbiter sandbox)."""

    #: Created, not started.
    INIT = "init"
    #: Connected and accepting commands.
    RUNNING = "running"
    #: Stopped; may start again.
    IDLE = "idle"
    #: A start or the connection failed; may start again.
    ERROR = "error"
    #: Closed for good.
    CLOSED = "closed"


#: The transitions the Orbiter sandbox allows, from each state.
TRANSITIONS: dict[SandboxStatus, frozenset[SandboxStatus]] = {
    SandboxStatus.INIT: frozenset({SandboxStatus.RUNNING, SandboxStatus.CLOSED}),
    SandboxStatus.RUNNING: frozenset({SandboxStatus.IDLE, SandboxStatus.ERROR, SandboxStatus.CLOSED}),
    SandboxStatus.IDLE: frozenset({SandboxStatus.RUNNING, SandboxStatus.ERROR, SandboxStatus.CLOSED}),
    SandboxStatus.ERROR: frozenset({SandboxStatus.RUNNING, SandboxStatus.CLOSED}),
    SandboxStatus.CLOSED: frozenset(),
}


def can_transition(current: SandboxStatus, target: SandboxStatus) -> bool:
    """Whether the Orbiter sandbox's lifecycle allows going from ``current`` to ``target``."""
    return target in TRANSITIONS[current]


class Lifecycle:
    """Lifecycle holds a sandbox's state and allows only the Orbiter sandbox's transitions: any other is a SandboxError with
    code ``INVALID_TRANSITION``, and the state stays as it was."""

    def __init__(self) -> None:
        self._status = SandboxStatus.INIT

    @property
    def status(self) -> SandboxStatus:
        """The current state."""
        return self._status

    def transition(self, target: SandboxStatus) -> None:
        """Moves to ``target``, or raises SandboxError (``INVALID_TRANSITION``) when the Orbiter sandbox's lifecycle does not allow it."""
        if not can_transition(self._status, target):
            raise SandboxError(f"invalid sandbox transition: {self._status} -> {target}", code="INVALID_TRANSITION")
        self._status = target

    def assert_running(self) -> None:
        """Raises SandboxError (``NOT_RUNNING``) unless the state is ``running``."""
        if self._status != SandboxStatus.RUNNING:
            raise SandboxError(f"the sandbox is {self._status}, not running: start it first", code="NOT_RUNNING")
