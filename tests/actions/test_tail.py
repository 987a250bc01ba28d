"""The kept end of a command's output: the last 200 lines, at most 64 KiB, whatever the output's length."""

from __future__ import annotations

import tracemalloc

from styrmin_backend.actions._tail import OutputTail
from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_BYTES, OUTPUT_TAIL_MAX_LINES, REDACTED


def feed(tail: OutputTail, data: bytes, chunk: int = 4096) -> OutputTail:
    for start in range(0, len(data), chunk):
        tail.feed(data[start : start + chunk])
    return tail


def test_short_output_is_kept_whole_and_not_flagged() -> None:
    tail = feed(OutputTail(), b"one\ntwo\nthree\n")
    assert (tail.text(), tail.truncated) == ("one\ntwo\nthree\n", False)


def test_only_the_last_200_lines_are_kept_and_the_cut_is_flagged() -> None:
    data = b"".join(b"line %d\n" % i for i in range(1000))
    tail = feed(OutputTail(), data)
    lines = tail.text().splitlines()
    assert len(lines) == OUTPUT_TAIL_MAX_LINES
    assert (lines[0], lines[-1], tail.truncated) == ("line 800", "line 999", True)


def test_long_lines_are_cut_to_64_kib_at_a_line_start() -> None:
    data = b"".join(b"%05d " % i + b"x" * 1000 + b"\n" for i in range(150))
    tail = feed(OutputTail(), data, chunk=7000)
    text = tail.text()
    assert len(text.encode()) <= OUTPUT_TAIL_MAX_BYTES
    assert all(line.endswith("x") and len(line) == 1006 for line in text.splitlines())
    assert text.splitlines()[-1].startswith("00149 ")
    assert tail.truncated


def test_one_huge_line_keeps_its_end() -> None:
    tail = feed(OutputTail(), b"a" * 1_000_000 + b"END")
    assert tail.text().endswith("END") and len(tail.text()) == OUTPUT_TAIL_MAX_BYTES and tail.truncated


def test_a_cut_inside_a_utf8_character_drops_its_rest() -> None:
    tail = feed(OutputTail(max_lines=200, max_bytes=5), "ééé\n".encode())
    assert tail.text() == "éé\n" and tail.truncated


def test_nul_and_undecodable_bytes_show_as_replacement_characters() -> None:
    tail = feed(OutputTail(), b"row\x00id\n\xffdone\n")
    assert tail.text() == "row\ufffdid\n\ufffddone\n"
    assert tail.redacted([])[0] == tail.text()


def test_the_token_is_redacted_and_the_result_still_fits() -> None:
    token = "sta_" + "k" * 40
    data = b"".join(b"password=x token %s\n" % token.encode() for _ in range(5000))
    text, truncated = feed(OutputTail(), data).redacted([token])
    assert token not in text and REDACTED in text
    assert len(text.encode()) <= OUTPUT_TAIL_MAX_BYTES and truncated


def test_memory_stays_bounded_by_the_tail_size_for_100_mb() -> None:
    chunk = (b"x" * 99 + b"\n") * 655  # 64 KiB
    tail = OutputTail()
    tracemalloc.start()
    for _ in range(1600):  # 100 MiB
        tail.feed(chunk)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 512 * 1024, peak
    assert tail.total_bytes == 1600 * len(chunk) and tail.truncated
