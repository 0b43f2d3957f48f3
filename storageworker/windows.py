"""Compaction windows: the daily times in which the cleaner may start new work.

A window is ``"HH:MM-HH:MM"`` in the volume's time zone; one whose end is before its start runs
past midnight (``"22:00-06:00"``); one whose end equals its start, like ``"00:00-24:00"``, is the
whole day. Outside every
window the cleaner starts nothing new except compact-now requests and logs whose
``max.compaction.lag.ms`` is about to be breached (see
:class:`storagecore.cleaner.log_cleaner.LogCleaner`); no windows means always open. Pure: the caller
passes the time.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import zoneinfo
from collections.abc import Sequence

from storagecore.errors import ConfigError

_WINDOW = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")
_MINUTES_PER_DAY = 24 * 60


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    start_minute: int
    """Minutes after local midnight, 0..1439."""
    end_minute: int
    """Minutes after local midnight, 0..1440; before start: the window crosses midnight; equal
    to start (modulo a day): the whole day."""
    text: str

    def contains(self, minute: int) -> bool:
        if self.start_minute == self.end_minute % _MINUTES_PER_DAY:
            return True
        if self.start_minute < self.end_minute:
            return self.start_minute <= minute < self.end_minute
        return minute >= self.start_minute or minute < self.end_minute


def parse_window(text: str, *, where: str = "compactionWindows") -> Window:
    match = _WINDOW.match(text)
    if match is None:
        raise ConfigError(f'{where}: {text!r} is not a window like "22:00-06:00"')
    start_h, start_m, end_h, end_m = (int(g) for g in match.groups())
    if start_h > 23 or start_m > 59 or end_m > 59 or end_h > 24 or (end_h == 24 and end_m):
        raise ConfigError(f"{where}: {text!r} has an hour or minute out of range")
    return Window(start_h * 60 + start_m, end_h * 60 + end_m, text.strip())


@dataclasses.dataclass(frozen=True, slots=True)
class CompactionWindows:
    windows: tuple[Window, ...] = ()
    time_zone: str = "UTC"

    @classmethod
    def parse(cls, windows: Sequence[str], time_zone: str = "UTC") -> CompactionWindows:
        parsed = tuple(
            parse_window(str(w), where=f"compactionWindows.windows[{i}]")
            for i, w in enumerate(windows)
        )
        try:
            zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"compactionWindows.timeZone: unknown time zone {time_zone!r} "
                '(an IANA name such as "Europe/Paris" or "UTC")'
            ) from None
        return cls(parsed, time_zone)

    @property
    def always_open(self) -> bool:
        return not self.windows

    def is_open(self, now_ms: int) -> bool:
        if not self.windows:
            return True
        local = datetime.datetime.fromtimestamp(now_ms / 1000, zoneinfo.ZoneInfo(self.time_zone))
        minute = local.hour * 60 + local.minute
        return any(w.contains(minute) for w in self.windows)

    def describe(self) -> str:
        if not self.windows:
            return "always"
        return ", ".join(w.text for w in self.windows) + f" ({self.time_zone})"
