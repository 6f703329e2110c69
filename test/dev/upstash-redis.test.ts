import { createHash, randomUUID } from "node:crypto";
import { Ratelimit } from "@upstash/ratelimit";
import { errors, Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { type RunningUpstashRedis, startUpstashRedis } from "../../dev/upstash-redis/index.ts";
import { type RunningRedisServer, startRedisServer } from "../../dev/upstash-redis/redis-server.ts";
import { freePort } from "../support/ports.ts";
import { refusesItem, spans } from "../support/readme-refusals.ts";

const { UpstashError } = errors;
const token = "local-upstash-token";
let server: RunningRedisServer;
let rest: RunningUpstashRedis;

beforeAll(async () => {
  server = await startRedisServer({ port: await freePort() });
  rest = await startUpstashRedis({ port: await freePort(), redisUrl: server.url, token });
});

afterAll(async () => {
  await rest?.close();
  await server?.stop();
});

/** A fresh key namespace per test. */
const keys = () => {
  const prefix = `t:${randomUUID()}`;
  return (name: string) => `${prefix}:${name}`;
};
const client = (options: { autoPipelining?: boolean } = {}) =>
  new Redis({ url: rest.url, token, enableAutoPipelining: options.autoPipelining ?? true });

describe("Upstash Redis REST stand-in, through @upstash/redis", () => {
  test("set/get/incr/expire round-trip with auto-pipelining and without", async () => {
    for (const autoPipelining of [true, false]) {
      const key = keys();
      const redis = client({ autoPipelining });
      expect(await redis.set(key("s"), "hello")).toBe("OK");
      expect(await redis.get(key("s"))).toBe("hello");
      expect(await redis.incr(key("n"))).toBe(1);
      expect(await redis.incrby(key("n"), 41)).toBe(42);
      expect(await redis.expire(key("n"), 100)).toBe(1);
      const ttl = await redis.ttl(key("n"));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(100);
      expect(await redis.set(key("x"), "v", { nx: true, ex: 60 })).toBe("OK");
      expect(await redis.set(key("x"), "w", { nx: true, ex: 60 })).toBeNull();
    }
  });

  test("a missing key reads as null", async () => {
    const key = keys();
    expect(await client().get(key("missing"))).toBeNull();
    expect(await client({ autoPipelining: false }).get(key("missing"))).toBeNull();
  });

  test("JSON values, unicode and binary-ish strings survive the base64 encoding", async () => {
    const key = keys();
    const redis = client();
    const job = { id: "j1", tokens: 1200, tags: ["a", "ü"], nested: { ok: true, none: null } };
    await redis.set(key("json"), job);
    expect(await redis.get(key("json"))).toEqual(job);
    const unicode = "héllo ✓ 日本語 🎉 \u0000\u0001\t\n end";
    await redis.set(key("u"), unicode);
    expect(await redis.get(key("u"))).toBe(unicode);
    // A string that is itself "OK" or looks like base64 comes back unchanged.
    await redis.set(key("ok"), "OK");
    expect(await redis.get(key("ok"))).toBe("OK");
    await redis.hset(key("h"), { field: "värde", n: 7 });
    expect(await redis.hgetall(key("h"))).toEqual({ field: "värde", n: 7 });
    await redis.zadd(key("z"), { score: 1.5, member: "m" });
    expect(await redis.zscore(key("z"), "m")).toBe(1.5);
  });

  test("an explicit pipeline runs in order and reports each result", async () => {
    const key = keys();
    const results = await client()
      .pipeline()
      .set(key("a"), "1")
      .incr(key("a"))
      .get(key("a"))
      .lpush(key("l"), "x", "y")
      .lrange(key("l"), 0, -1)
      .exec();
    expect(results).toEqual(["OK", 2, 2, 2, ["y", "x"]]);
  });

  test("a failing command inside a pipeline is reported per entry, the others still run", async () => {
    const key = keys();
    const redis = client();
    await redis.set(key("s"), "not a number");
    const results = await redis
      .pipeline()
      .incr(key("s"))
      .set(key("after"), "ran")
      .exec({ keepErrors: true });
    expect(results[0]?.error).toMatch(/not an integer/);
    expect(results[1]?.result).toBe("OK");
    expect(await redis.get(key("after"))).toBe("ran");
  });

  test("multi-exec is atomic: 20 racing transactions each see their own increment", async () => {
    const key = keys();
    const redis = client();
    const runs = await Promise.all(
      Array.from({ length: 20 }, () => redis.multi().incr(key("n")).get(key("n")).exec()),
    );
    for (const [incremented, read] of runs as [number, number][]) expect(read).toBe(incremented);
    expect(runs.map(([n]) => n).sort((a, b) => (a as number) - (b as number))).toEqual(
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
  });

  test("a transaction whose command fails at run time reports that entry; the rest commits", async () => {
    const key = keys();
    const redis = client();
    const tx = redis.multi();
    tx.set(key("a"), "1");
    tx.incrby(key("a"), "x" as unknown as number); // runtime error: reported, the SET still ran
    const results = await tx.exec({ keepErrors: true });
    expect(results[0]?.result).toBe("OK");
    expect(results[1]?.error).toMatch(/not an integer/);
  });

  test("a command Redis rejects surfaces as UpstashError with Redis's message", async () => {
    const key = keys();
    for (const autoPipelining of [true, false]) {
      const redis = client({ autoPipelining });
      await redis.set(key("s"), "text");
      const failure = await redis.incr(key("s")).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(UpstashError);
      expect((failure as Error).message).toMatch(/ERR value is not an integer or out of range/);
      const unknown = await redis
        .eval("return redis.call('NOPE')", [], [])
        .catch((error: unknown) => error);
      expect(unknown).toBeInstanceOf(UpstashError);
    }
  });

  test("commands that would hold or change the shared connection are refused, not run", async () => {
    const key = keys();
    for (const autoPipelining of [true, false]) {
      const redis = client({ autoPipelining });
      const started = Date.now();
      const blocked = await redis
        .xread(key("stream"), "$", { blockMS: 5_000 })
        .catch((error: unknown) => error);
      expect(blocked).toBeInstanceOf(UpstashError);
      expect((blocked as Error).message).toMatch(/blocking commands are not served/);
      expect(Date.now() - started).toBeLessThan(2_000);
      // Without BLOCK, XREAD is an ordinary read.
      expect(await redis.xread(key("stream"), "0")).toBeNull();
    }
    for (const command of [
      ["SELECT", "1"],
      ["BLPOP", key("list"), "5"],
      ["CLIENT", "KILL"],
    ]) {
      const res = await fetch(rest.url, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(command),
      });
      expect([command[0], res.status]).toEqual([command[0], 400]);
    }
  });

  test("Upstash's modules are refused as Upstash answers an unknown command; newer commands are redis-server's unknown command", async () => {
    const key = keys();
    for (const autoPipelining of [true, false]) {
      const redis = client({ autoPipelining });
      // Upstash serves JSON.* (and SEARCH.*, VECTOR.*); the stand-in does not, and says so.
      const json = await redis.json.set(key("doc"), "$", { a: 1 }).catch((e: unknown) => e);
      expect(json).toBeInstanceOf(UpstashError);
      expect((json as Error).message).toMatch(
        /ERR unknown command 'JSON\.SET': Redis module commands .* are not served by the local stand-in/,
      );
      // HEXPIRE is Redis 7.4; Debian's redis-server is 7.0: its own unknown command, a 400.
      await redis.hset(key("h"), { f: "v" });
      const newer = await redis.hexpire(key("h"), "f", 10).catch((e: unknown) => e);
      expect(newer).toBeInstanceOf(UpstashError);
      expect((newer as Error).message).toMatch(/ERR unknown command 'HEXPIRE'/);
    }
    for (const command of [
      ["SEARCH.QUERY", "idx", "{}"],
      ["VECTOR.ADD", "idx", "v", "[1]"],
      ["FT.SEARCH", "idx", "*"],
      ["CONFIG", "SET", "maxmemory", "1"],
      ["MODULE", "LIST"],
      ["SAVE"],
    ]) {
      const res = await fetch(rest.url, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(command),
      });
      const body = (await res.json()) as { error?: string };
      expect([command[0], res.status]).toEqual([command[0], 400]);
      expect(body.error).toMatch(/^ERR (unknown command|Command is not available)/);
    }
    // JSON.SET never reached redis-server.
    expect(await client().get(key("doc"))).toBeNull();
  });

  // `JSON.*` names a family: probe one of it. `XREAD ... BLOCK` is a blocking read.
  const listed = spans(refusesItem("Upstash Redis")).flatMap((s): string[][] => {
    if (s === "XREAD ... BLOCK") return [["XREAD", "BLOCK", "1000", "STREAMS", "k", "$"]];
    const m = /^([A-Z]+(?:\.[A-Z*]+)?)$/.exec(s);
    return m ? [[(m[1] ?? "").replace(".*", ".GET"), "k"]] : [];
  });
  test(`every command dev/README.md's refusal list names (${listed.length}) is answered 400, and never reaches redis-server`, async () => {
    expect(listed.length).toBeGreaterThanOrEqual(30);
    const answers: Array<[string, number, string]> = [];
    for (const command of listed) {
      const res = await fetch(rest.url, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(command),
      });
      const { error = "" } = (await res.json()) as { error?: string };
      answers.push([command[0] ?? "", res.status, error]);
    }
    const refused =
      /^ERR (Command is not available|blocking commands are not served|unknown command)/;
    expect(answers.filter(([, status, error]) => status !== 400 || !refused.test(error))).toEqual(
      [],
    );
    // SHUTDOWN, CONFIG and SELECT never reached it: the same server answers, on database 0.
    const redis = client();
    await redis.set("readme-refusals", "db0");
    expect(await redis.get("readme-refusals")).toBe("db0");
  });

  test("the token as the `_token` parameter, as Upstash's REST docs show, is served; a wrong one is 401", async () => {
    const key = keys();
    const call = (token: string) =>
      fetch(`${rest.url}/?_token=${encodeURIComponent(token)}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(["SET", key("t"), "v"]),
      });
    const right = await call(token);
    expect({ status: right.status, body: await right.json() }).toEqual({
      status: 200,
      body: { result: "OK" },
    });
    const wrong = await call("wrong-token");
    expect({ status: wrong.status, body: await wrong.json() }).toEqual({
      status: 401,
      body: { error: "Unauthorized" },
    });
  });

  test("a wrong token is refused as Unauthorized", async () => {
    const key = keys();
    for (const wrong of ["wrong-token", "local-upstash-token-but-not-quite"]) {
      const redis = new Redis({ url: rest.url, token: wrong });
      const failure = await redis.get(key("k")).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(UpstashError);
      expect((failure as Error).message).toMatch(/^Unauthorized/);
    }
  });

  test("@upstash/ratelimit sliding window: 3 allowed, the 4th denied with a reset time", async () => {
    const prefix = `rl:${randomUUID()}`;
    const limiter = new Ratelimit({
      redis: client(),
      limiter: Ratelimit.slidingWindow(3, "10 s"),
      prefix,
      ephemeralCache: false,
    });
    // A second limiter finds the script loaded (EVALSHA succeeds) and shares the count.
    const again = new Ratelimit({
      redis: client({ autoPipelining: false }),
      limiter: Ratelimit.slidingWindow(3, "10 s"),
      prefix,
      ephemeralCache: false,
    });
    // The sliding window weighs the previous window's count down and rounds it down, so calls
    // that straddle a window boundary (windows start at multiples of 10 s) are let through once
    // more, as Upstash's own script does: such a run is made again with another user. At most
    // once: the run is far shorter than a window.
    const windowOf = (t: number) => Math.floor(t / 10_000);
    let user = "";
    let results: Awaited<ReturnType<typeof limiter.limit>>[] = [];
    let sharedCount = true;
    for (let attempt = 0; attempt < 2; attempt++) {
      user = randomUUID();
      results = [];
      const started = Date.now();
      for (let i = 0; i < 4; i++) results.push(await limiter.limit(user));
      sharedCount = (await again.limit(user)).success;
      if (windowOf(started) === windowOf(Date.now())) break;
    }
    expect(results.map((r) => r.success)).toEqual([true, true, true, false]);
    expect(results.map((r) => r.remaining)).toEqual([2, 1, 0, 0]);
    const denied = results[3];
    expect(denied?.reason).toBeUndefined(); // not "timeout": Redis answered
    expect(denied?.reset).toBeGreaterThan(Date.now());
    expect(denied?.reset).toBeLessThanOrEqual(Date.now() + 10_000);
    expect(sharedCount).toBe(false);
    expect((await again.limit(randomUUID())).success).toBe(true);
  });

  test("scripts with Upstash's allow-key-locking flag run, and EVALSHA finds them by the client's SHA1", async () => {
    for (const autoPipelining of [true, false]) {
      const key = keys();
      const redis = client({ autoPipelining });
      const script = `#!lua flags=allow-key-locking\nreturn redis.call("INCRBY", KEYS[1], ARGV[1]) -- ${randomUUID()}`;
      const sha = createHash("sha1").update(script).digest("hex");
      const missing = await redis.evalsha(sha, [key("n")], ["1"]).catch((error: unknown) => error);
      expect((missing as Error).message).toMatch(/NOSCRIPT/);
      expect(await redis.eval(script, [key("n")], ["2"])).toBe(2);
      expect(await redis.evalsha(sha, [key("n")], ["3"])).toBe(5);
      const loaded = `#!lua flags=allow-key-locking,no-writes\nreturn ARGV[1] -- ${randomUUID()}`;
      expect(await redis.scriptLoad(loaded)).toBe(createHash("sha1").update(loaded).digest("hex"));
      expect(await redis.evalsha(createHash("sha1").update(loaded).digest("hex"), [], ["hi"])).toBe(
        "hi",
      );
    }
  });

  test("Redis unreachable: the stand-in answers 500 and the SDK throws", async () => {
    const own = await startRedisServer({ port: await freePort() });
    const proxy = await startUpstashRedis({ port: await freePort(), redisUrl: own.url, token });
    try {
      const redis = new Redis({ url: proxy.url, token, retry: false });
      expect(await redis.set("k", "v")).toBe("OK");
      await own.stop();
      const failure = await redis.get("k").catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(UpstashError);
      expect((failure as Error).message).toMatch(/unreachable/);
    } finally {
      await proxy.close();
      await own.stop();
    }
  });
});

describe("startRedisServer", () => {
  test("a port already in use fails with one clear line", async () => {
    const failure = await startRedisServer({ port: server.port }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(Error);
    expect((failure as Error).message).toBe(
      `redis-server could not listen on 127.0.0.1:${server.port}: the port is already in use`,
    );
  });

  test("a missing binary fails with the install hint", async () => {
    const failure = await startRedisServer({
      port: await freePort(),
      binary: "redis-server-not-installed",
    }).catch((error: unknown) => error);
    expect((failure as Error).message).toBe(
      'redis-server not found: install it with "apt-get install -y redis-server"',
    );
  });
});
