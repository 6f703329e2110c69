/**
 * Broadcast from the database, read as Supabase Realtime reads it: by logical decoding of
 * `realtime.messages`. A publication of the table's inserts, a temporary replication slot with
 * the pgoutput plugin, and the stream of its changes (`pg-logical-replication`, a client of the
 * replication protocol over `pg`).
 *
 * What logical decoding gives, and the stand-in relies on: a transaction's rows arrive only once
 * it commits, whole, transactions in commit order, and a rolled-back transaction (or a
 * rolled-back savepoint, such as `realtime.send`'s failed insert or the authorization probes)
 * never arrives. The slot is temporary: it lives as long as the stream's connection, so a
 * stopped or crashed stand-in leaves no slot holding WAL; while it runs, each commit it has
 * delivered is acknowledged, so the server may recycle the WAL behind it.
 */
import { randomBytes } from "node:crypto";
import type pg from "pg";
import { LogicalReplicationService, type Pgoutput, PgoutputPlugin } from "pg-logical-replication";

/** Realtime's publication of `realtime.messages` (a hosted project has it by that name). */
export const PUBLICATION = "supabase_realtime_messages_publication";

/** A committed row of `realtime.messages` of extension broadcast, as Realtime hands it on. */
export interface DatabaseMessage {
  id: string;
  topic: string;
  event: string | null;
  private: boolean;
  /** The jsonb payload's text, or null. */
  payload: string | null;
  binaryPayload: Buffer | null;
}

export interface MessageStream {
  /** The temporary slot's name. */
  slot: string;
  stop(): Promise<void>;
}

/**
 * The publication, made once per database as Realtime makes it when it connects to a project:
 * inserts only (Broadcast reads no other change). Two stand-ins starting on one database may
 * race to make it; the loser finds it made.
 */
export async function ensurePublication(pool: pg.Pool): Promise<void> {
  const exists = async () =>
    (await pool.query("select 1 from pg_catalog.pg_publication where pubname = $1", [PUBLICATION]))
      .rowCount === 1;
  if (await exists()) return;
  try {
    await pool.query(
      `create publication ${PUBLICATION} for table realtime.messages with (publish = 'insert')`,
    );
  } catch (e) {
    if (!(await exists())) throw e;
  }
}

/** pgoutput on a slot made by the stream's own connection: a temporary slot is its session's. */
class TemporarySlot extends PgoutputPlugin {
  override async start(client: pg.Client, slotName: string, lastLsn: string): Promise<unknown> {
    // Waits for the transactions running now to end: the slot sees every one that commits later.
    await client.query(
      `CREATE_REPLICATION_SLOT "${slotName}" TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')`,
    );
    return super.start(client, slotName, lastLsn);
  }
}

const isMessages = (r: Pgoutput.MessageRelation) =>
  r.schema === "realtime" && /^messages(_|$)/.test(r.name);

/** A row from its columns' text (the relation's parsers are replaced by the identity). */
function decode(row: Record<string, string | null>): DatabaseMessage | null {
  if (row.extension !== "broadcast" || !row.id || row.topic == null) return null;
  const binary = row.binary_payload;
  return {
    id: row.id,
    topic: row.topic,
    event: row.event ?? null,
    private: row.private === "t",
    payload: row.payload ?? null,
    binaryPayload: binary == null ? null : Buffer.from(binary.replace(/^\\x/, ""), "hex"),
  };
}

/**
 * Streams the committed broadcast rows of `realtime.messages` to `deliver`, a transaction's rows
 * together at its commit, in commit order. Resolves once the server streams from the slot:
 * every transaction committing after that is delivered.
 */
export async function streamMessages(o: {
  databaseUrl: string;
  deliver: (message: DatabaseMessage) => void;
  log: (line: string) => void;
}): Promise<MessageStream> {
  const slot = `realtime_stand_in_${randomBytes(6).toString("hex")}`;
  const service = new LogicalReplicationService(
    // Text output of bytea in hex, whatever the server's default.
    { connectionString: o.databaseUrl, options: "-c bytea_output=hex" },
    // Acknowledged here, at each commit delivered and each keepalive; the library's timer also
    // confirms how far the stream has read when nothing was acknowledged for 10 s.
    { acknowledge: { auto: false, timeoutSeconds: 10 }, flowControl: { enabled: false } },
  );
  let pending: DatabaseMessage[] | null = null;
  service.on("data", (_lsn: string, m: Pgoutput.Message) => {
    switch (m.tag) {
      case "relation":
        // Each column's text as sent (jsonb as the server wrote it, no round trip through
        // JSON.parse): the parser's cache keeps this object, so later inserts read through it.
        if (isMessages(m)) for (const c of m.columns) c.parser = (raw: string) => raw;
        return;
      case "begin":
        pending = [];
        return;
      case "insert": {
        if (!isMessages(m.relation)) return;
        const message = decode(m.new);
        if (message) pending?.push(message);
        return;
      }
      case "commit": {
        const rows = pending ?? [];
        pending = null;
        for (const message of rows) o.deliver(message);
        if (m.commitEndLsn) void service.acknowledge(m.commitEndLsn);
        return;
      }
    }
  });
  // A keepalive says how far the server has read for this slot (other databases' WAL, other
  // tables'): confirmed at once between transactions, so the slot never holds WAL behind it.
  service.on("heartbeat", (lsn: string) => {
    if (pending === null) void service.acknowledge(lsn);
  });
  service.on("error", (e: Error) => o.log(`realtime stand-in: replication: ${e.message}`));

  await new Promise<void>((resolve, reject) => {
    let started = false;
    service.once("start", () => {
      started = true;
      resolve();
    });
    service
      .subscribe(new TemporarySlot({ protoVersion: 1, publicationNames: [PUBLICATION] }), slot)
      .then(
        () => {
          if (!started) reject(new Error("replication ended before it started"));
        },
        (e: Error) => {
          if (started) o.log(`realtime stand-in: replication: ${e.message}`);
          else reject(e);
        },
      );
  });
  return {
    slot,
    async stop() {
      await service.destroy();
    },
  };
}
