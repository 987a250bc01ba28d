"""Replace secrets in text that users read (step errors, output tails) with ``<redacted>``.

Three passes, in this order:

1. the secrets the caller knows (the action's token), replaced wherever they appear;
2. explicit patterns for common forms: private keys, URLs with credentials, bearer and basic
   authorization, ``password=``/``token:`` pairs, JWTs and cloud keys. Each keeps what names the
   secret (the key, the URL's user and host) and replaces only the secret itself;
3. the regex-based plugins of detect-secrets (GitHub, GitLab, Slack, Stripe, AWS, ...), whose
   findings are replaced wherever they appear.

The entropy plugins of detect-secrets are left out on purpose: they flag image digests, commit
hashes and ids, which users need to read in an error. So is its public IP detector.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from styrmin_backend.domain.limits import REDACTED
from styrmin_backend.domain.secrets import HIDDEN_VALUE_NAME_WORDS, URL_PASSWORD

_KEY_WORDS = HIDDEN_VALUE_NAME_WORDS

_KEY_WORD_INITIALS = "pPsStTaAcCdD"
"""The first letters of ``_KEY_WORDS``: checking them first makes the key=value rule several times faster."""

_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _keep_group(name: str) -> Callable[[re.Match[str]], str]:
    """A replacement keeping the named prefix group and redacting the rest of the match."""
    return lambda match: match.group(name) + REDACTED


def _redact_all(_match: re.Match[str]) -> str:
    return REDACTED


_RULES: tuple[_Rule, ...] = (
    # A PEM private key, to its END line or, when the text was cut before it, to the end.
    (
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        _redact_all,
    ),
    # scheme://user:password@host: keep the user and host.
    (
        re.compile(URL_PASSWORD.replace("(?P<password>", "(?!<redacted>@)(?P<password>")),
        _keep_group("keep"),
    ),
    # Authorization headers: "Bearer <token>", "Basic <base64>", "token <token>".
    (
        re.compile(
            r"(?=[BbTD])(?P<keep>\b(?:[Bb]earer|[Bb]asic|Token|Digest)\s+)(?!<redacted>)[A-Za-z0-9._~+/=-]{6,}"
        ),
        _keep_group("keep"),
    ),
    # key=value, key: value, "key": "value", DB_PASSWORD='value': keep the key and the quotes. The match
    # starts at the key word, not at the start of the key, so the text before it is never rescanned.
    (
        re.compile(
            rf"""(?=[{_KEY_WORD_INITIALS}])(?P<keep>(?:{_KEY_WORDS})[\w.-]{{0,40}}["']?[ \t]*[=:][ \t]*(?P<quote>["'])?)"""
            r"""(?!<redacted>)(?P<value>(?(quote)[^"'\r\n]+|[^\s"',;&)}\]]+))""",
            re.IGNORECASE,
        ),
        _keep_group("keep"),
    ),
    # JSON Web Tokens (header.payload.signature), wherever they stand.
    (re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]+)?"), _redact_all),
    # Google API keys and OAuth access tokens.
    (re.compile(r"AIza(?<![\w-]AIza)[0-9A-Za-z_-]{35}(?![\w-])"), _redact_all),
    (re.compile(r"ya29\.(?<![\w-]ya29\.)[0-9A-Za-z_-]{20,}"), _redact_all),
    # AWS access key ids; their secret keys are caught by the key=value rule or detect-secrets.
    (re.compile(r"A(?<!\wA)(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[0-9A-Z]{16}\b"), _redact_all),
)

_EXCLUDED_PLUGINS = frozenset({"IPPublicDetector"})
_MIN_FOUND_SECRET = 8
"""detect-secrets findings shorter than this are too likely to be ordinary words to replace everywhere."""
_STRIP_AROUND_FOUND = " \t\r\n\"'=:"


_NEEDS_KEY_WORD = "(?:(?<=\\W)|(?<=^))"
"""How detect-secrets' keyword-anchored patterns (Cloudant, IBM, SoftLayer) start. Each of them also
requires one of the words that ``_KEY_WORD_HINT`` finds, so only lines with one are searched: they are
the slowest patterns, and most lines of a command's output have none of those words."""
_KEY_WORD_HINT = re.compile(r"key|pw|pass|token", re.IGNORECASE)


@cache
def _detect_secrets_patterns() -> tuple[tuple[re.Pattern[str], bool], ...]:
    """The regexes of detect-secrets' regex-based plugins, each with whether it needs a key word line."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    patterns: list[tuple[re.Pattern[str], bool]] = []
    plugin_class: Any
    for plugin_class in get_mapping_from_secret_type_to_class().values():
        if issubclass(plugin_class, RegexBasedDetector) and plugin_class.__name__ not in _EXCLUDED_PLUGINS:
            patterns.extend(
                (pattern, pattern.pattern.startswith(_NEEDS_KEY_WORD)) for pattern in plugin_class().denylist
            )
    return tuple(patterns)


def _found_by_detect_secrets(text: str) -> set[str]:
    """The secrets that detect-secrets' patterns find in ``text``, line by line as detect-secrets reads."""
    found: set[str] = set()
    key_word_lines: str | None = None
    for pattern, needs_key_word in _detect_secrets_patterns():
        if needs_key_word:
            if key_word_lines is None:
                key_word_lines = "\n".join(line for line in text.splitlines() if _KEY_WORD_HINT.search(line))
            searched = key_word_lines
        else:
            searched = text
        for match in pattern.finditer(searched):
            # A pattern's group is the secret (a URL's password), unless it is only a prefix ("ghp").
            value = max((group for group in match.groups() if group), key=len, default="")
            if len(value) < _MIN_FOUND_SECRET:
                value = match.group(0)
            value = value.strip(_STRIP_AROUND_FOUND)
            if len(value) >= _MIN_FOUND_SECRET and REDACTED not in value:
                found.add(value)
    return found


def _replace_literals(text: str, secrets: Iterable[str]) -> str:
    literals = sorted({secret for secret in secrets if secret.strip()}, key=len, reverse=True)
    if not literals:
        return text
    return re.sub("|".join(re.escape(secret) for secret in literals), REDACTED, text)


def redact(text: str, extra_secrets: Iterable[str] = ()) -> str:
    """Return ``text`` with ``extra_secrets`` and common forms of secrets replaced by ``<redacted>``.

    Args:
        text: an error line or the end of a command's output, as users will read it.
        extra_secrets: values known to be secret wherever they appear, such as the action's token.
            Empty values are ignored.
    """
    text = _replace_literals(text, extra_secrets)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return _replace_literals(text, _found_by_detect_secrets(text))
