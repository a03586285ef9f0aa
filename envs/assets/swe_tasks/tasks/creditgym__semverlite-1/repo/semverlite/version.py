"""The ``Version`` type: parsing, ordering and bumping per https://semver.org (2.0.0)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_IDENT = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_PATTERN = re.compile(
    rf"""
    ^(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)
    (?:-(?P<prerelease>{_IDENT}(?:\.{_IDENT})*))?
    (?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$
    """,
    re.VERBOSE,
)


class InvalidVersion(ValueError):
    """A string that is not a valid semantic version."""


@functools.total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _PATTERN.match(text.strip())
        if match is None:
            raise InvalidVersion(f"{text!r} is not a valid semantic version")
        pre, build = match["prerelease"], match["build"]
        return cls(
            int(match["major"]),
            int(match["minor"]),
            int(match["patch"]),
            tuple(pre.split(".")) if pre else (),
            tuple(build.split(".")) if build else (),
        )

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    def _precedence_key(self) -> tuple:
        # build metadata does not take part in precedence (semver item 10)
        return (self.major, self.minor, self.patch, self.prerelease)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence_key() == other._precedence_key()

    def __hash__(self) -> int:
        return hash(self._precedence_key())

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence_key() < other._precedence_key()

    def bump_major(self) -> Version:
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> Version:
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> Version:
        # 1.2.3-rc.1 -> 1.2.3: finishing a pre-release keeps its number
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)
