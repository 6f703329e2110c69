import { describe, expect, test } from "vitest";
import { formatClock, formatDuration, formatWait, formatWhen } from "../../public/format.js";

const tokyo = { locale: "en-GB", timeZone: "Asia/Tokyo" };
const newYork = { locale: "en-US", timeZone: "America/New_York" };

describe("times in the user's local time", () => {
  test("UTC midnight is 09:00 in Tokyo and 7:00 PM the evening before in New York", () => {
    expect(formatClock("2026-12-01T00:00:00Z", tokyo)).toBe("09:00");
    expect(formatClock("2026-12-01T00:00:00Z", newYork)).toBe("07:00 PM");
  });

  test("formatWhen says today, tomorrow or the date, by the user's calendar", () => {
    const reset = "2026-12-01T00:00:00Z"; // 09:00 on 1 Dec in Tokyo
    expect(formatWhen(reset, new Date("2026-11-30T23:00:00Z"), tokyo)).toBe("at 09:00");
    expect(formatWhen(reset, new Date("2026-11-30T05:00:00Z"), tokyo)).toBe("tomorrow at 09:00");
    expect(formatWhen(reset, new Date("2026-11-20T05:00:00Z"), tokyo)).toBe("on 1 Dec at 09:00");
    // the same instant is still "today" in New York (7 PM on 30 Nov)
    expect(formatWhen(reset, new Date("2026-11-30T15:00:00Z"), newYork)).toBe("at 07:00 PM");
  });
});

describe("durations", () => {
  test("elapsed time reads at a glance", () => {
    expect(formatDuration(-5)).toBe("0 s");
    expect(formatDuration(8_400)).toBe("8 s");
    expect(formatDuration(125_000)).toBe("2 min 5 s");
    expect(formatDuration(3_840_000)).toBe("1 h 4 min");
  });

  test("waits are whole seconds, then whole minutes, rounded up", () => {
    expect(formatWait(0.2)).toBe("1 second");
    expect(formatWait(20)).toBe("20 seconds");
    expect(formatWait(61)).toBe("2 minutes");
    expect(formatWait(60)).toBe("1 minute");
  });
});
