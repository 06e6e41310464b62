"""The package's warning class, its option errors, and the bound on outside text quoted.

At the bottom of the import graph (imports nothing of sysmetrics), so that every layer,
from collectors to sinks and callbacks, can warn or reject an option without importing
another layer.
"""

from __future__ import annotations

from typing import Any

PARTS = ("value", "entry", "name", "key")
"""Where an :class:`OptionError`'s ``value`` sits in the option's value (its ``part``)."""


class SystemMetricsWarning(RuntimeWarning):
    """A collector, or one device of it, failed and was disabled; the rest go on."""


class OptionError(ValueError):
    """An option's value is invalid: which option, the value, and what is allowed.

    ``str()`` is the message, composed from the fields: ``interval=0 is invalid: it must
    be ...``, ``disk_paths contains '/x', which does not exist: ...``, ``open_metrics
    name 'a b' is invalid: ...``, ``open_metrics['gpu']='ftp://h/m' is invalid: ...``.
    Programs read the fields, never the message (``sysmetrics record`` names its flag
    from ``option``, and shows ``value`` as typed).

    Attributes:
        option: the option's name, as declared in :data:`sysmetrics.options.OPTIONS`.
        value: the value given, or the offending part of it (see ``part``).
        allowed: what is allowed, as text (``"use 'step' or 'epoch'"``); empty where the
            problem says it all.
        problem: what is wrong with ``value`` (``"is invalid"``, ``"does not exist"``,
            ``"cannot be watched: NVML sees no GPU"``); empty after an entry (``part``
            ``"entry"``) that is simply not allowed.
        part: where ``value`` sits: ``"value"`` (the whole value), ``"entry"`` (one entry
            of a list: a path of ``disk_paths``, an id of ``gpu_ids``), ``"name"`` (a name
            of a mapping: an endpoint's of ``open_metrics``) or ``"key"`` (the value at
            ``key`` of a mapping: an endpoint's URL).
        key: with ``part`` ``"key"``, the name whose value ``value`` is; else None.
        subject: the message's words for the value where they differ from those
            ``part`` gives (``"monitor="``); else None.

    """

    def __init__(
        self,
        option: str,
        value: object,
        allowed: str = "",
        *,
        problem: str = "is invalid",
        part: str = "value",
        key: object = None,
        subject: str | None = None,
    ) -> None:
        if part not in PARTS:
            raise ValueError(f"part={part!r} is invalid: use one of {PARTS}")
        self.option, self.value, self.allowed = option, value, allowed
        self.problem, self.part, self.key, self.subject = problem, part, key, subject
        super().__init__(self._message())

    def _message(self) -> str:
        if self.subject is not None:
            where = self.subject
        elif self.part == "entry":
            where = f"{self.option} contains {self.value!r}" + (", which" if self.problem else "")
        elif self.part == "name":
            where = f"{self.option} name {self.value!r}"
        elif self.part == "key":
            where = f"{self.option}[{self.key!r}]={self.value!r}"
        else:
            where = f"{self.option}={self.value!r}"
        return where + self.rest

    @property
    def rest(self) -> str:
        """The message after the words for the value: ``" is invalid: use ..."``.

        For a caller that shows the value its own way (``sysmetrics record``: as typed).
        """
        said = f" {self.problem}" if self.problem else ""
        return said + (f": {self.allowed}" if self.allowed else "")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its fields (a worker process's error reaches its parent whole).
        return (
            _rebuild,
            (type(self), self.option, self.value, self.allowed, self._keywords()),
        )

    def _keywords(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "part": self.part,
            "key": self.key,
            "subject": self.subject,
        }


class OptionTypeError(OptionError, TypeError):
    """An :class:`OptionError` of the value's type: a ``TypeError`` too."""


def _rebuild(
    cls: type[OptionError], option: str, value: object, allowed: str, keywords: dict[str, Any]
) -> OptionError:
    return cls(option, value, allowed, **keywords)


def quote(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, with ``...`` where it was cut.

    Outside input quoted in a warning or an error stays short.
    """
    return text if len(text) <= limit else text[:limit] + "..."
