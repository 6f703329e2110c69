/**
 * The worker's cursor over its streamed text (lib/partial-text.ts) on its own: what each write
 * sends, and how the database's answer moves it. Against the real record_progress, with lost
 * answers: test/db/progress-wal.test.ts.
 */
import { describe, expect, test } from "vitest";
import { storable, textCursor } from "../../lib/partial-text.ts";

describe("textCursor", () => {
  test("each write sends what followed the stored text, at its offset in characters", () => {
    const c = textCursor();
    const first = c.next("Once upon");
    expect(first).toEqual({ offset: 0, text: "Once upon" });
    c.stored("Once upon", first, 9);
    const second = c.next("Once upon a \u{1F600}");
    expect(second).toEqual({ offset: 9, text: " a \u{1F600}" });
    c.stored("Once upon a \u{1F600}", second, 13);
    // 13 characters, 14 code units: the emoji is one character to Postgres, two to JS.
    expect(c.next("Once upon a \u{1F600}!")).toEqual({ offset: 13, text: "!" });
  });

  test("an answer lost in transit: the next write sends from the old offset again", () => {
    const c = textCursor();
    c.next("abc");
    expect(c.next("abcdef")).toEqual({ offset: 0, text: "abcdef" });
  });

  test("the database's count wins over what was sent: the cursor moves to it", () => {
    const c = textCursor();
    const sent = c.next("\u{1F600}bcdef");
    // Fewer stored than sent (a gap the database refused): the next write starts there.
    c.stored("\u{1F600}bcdef", sent, 2);
    expect(c.next("\u{1F600}bcdefg")).toEqual({ offset: 2, text: "cdefg" });
  });

  test("a trailing high surrogate waits for its pair; a lone half becomes U+FFFD", () => {
    const c = textCursor();
    const held = c.next("ab\uD83D");
    expect(held).toEqual({ offset: 0, text: "ab" });
    c.stored("ab\uD83D", held, 2);
    expect(c.next("ab\uD83D\uDE00")).toEqual({ offset: 2, text: "\u{1F600}" });
    expect(c.next("ab\uD83Dx")).toEqual({ offset: 2, text: "\uFFFDx" });
    expect(storable("a\u0000b\uDE00")).toBe("a\uFFFDb\uFFFD");
  });
});
