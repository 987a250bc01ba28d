"""The end of a command's output, kept while the output streams by, in memory bounded by the tail's size."""

from __future__ import annotations

from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_BYTES, OUTPUT_TAIL_MAX_LINES
from styrmin_backend.domain.redaction import redact


class OutputTail:
    """Keeps the last ``max_lines`` lines of a byte stream, at most ``max_bytes``, whatever its length.

    The kept text is always a suffix of the stream no longer than ``max_bytes``, so only the last
    ``max_bytes + 1`` bytes are held (the extra byte tells whether the cut fell on a line boundary).

    >>> tail = OutputTail(max_lines=2, max_bytes=64)
    >>> tail.feed(b"one\\ntwo\\nthree\\n")
    >>> tail.text(), tail.truncated
    ('two\\nthree\\n', True)
    """

    def __init__(
        self, max_lines: int = OUTPUT_TAIL_MAX_LINES, max_bytes: int = OUTPUT_TAIL_MAX_BYTES
    ) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._kept = bytearray()
        self.total_bytes = 0

    def feed(self, chunk: bytes) -> None:
        """Add the next bytes of the stream."""
        self.total_bytes += len(chunk)
        keep = self.max_bytes + 1
        if len(chunk) >= keep:
            self._kept[:] = chunk[-keep:]
        else:
            self._kept += chunk
            if len(self._kept) > keep:
                del self._kept[: len(self._kept) - keep]

    def _suffix(self) -> tuple[bytes, bool]:
        data = bytes(self._kept)
        cut = self.total_bytes > len(data)
        if len(data) > self.max_bytes:
            # The byte before the kept part says whether the first kept line is whole.
            whole_first_line = data[0:1] == b"\n"
            data = data[1:]
            cut = True
            if not whole_first_line:
                newline = data.find(b"\n")
                # A partial first line is dropped, unless it is the only line: then its end is kept.
                if 0 <= newline < len(data) - 1:
                    data = data[newline + 1 :]
        lines = data.splitlines(keepends=True)
        if len(lines) > self.max_lines:
            data = b"".join(lines[-self.max_lines :])
            cut = True
        return data, cut

    def text(self) -> str:
        """The kept end of the output, as text (undecodable bytes and NUL replaced by U+FFFD)."""
        data, cut = self._suffix()
        return _decode(data, cut)

    @property
    def truncated(self) -> bool:
        """Whether earlier output was cut."""
        return self._suffix()[1]

    def redacted(self, secrets: list[str]) -> tuple[str, bool]:
        """The kept end with ``secrets`` and common forms of secrets redacted, and whether output was cut.

        Redaction can lengthen the text (``password=x`` becomes ``password=<redacted>``), so the result is
        cut again to ``max_bytes``.
        """
        data, cut = self._suffix()
        text = redact(_decode(data, cut), secrets)
        encoded = text.encode()
        if len(encoded) > self.max_bytes:
            encoded = encoded[-self.max_bytes :]
            newline = encoded.find(b"\n")
            if 0 <= newline < len(encoded) - 1:
                encoded = encoded[newline + 1 :]
            text, cut = _decode(encoded, True), True
        return text, cut


def _decode(data: bytes, cut: bool) -> str:
    # A cut can fall inside a UTF-8 character: drop its continuation bytes rather than show a "?".
    start = 0
    while cut and start < min(len(data), 3) and data[start] & 0xC0 == 0x80:
        start += 1
    # NUL is shown as undecodable bytes are: no database stores it in text, and the server refuses it.
    return data[start:].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
