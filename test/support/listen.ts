import type { Server } from "node:http";
import { onTestFinished } from "vitest";

/** Listens on 127.0.0.1:`port` until the current test finishes, then drops every connection. */
export async function listenForTest(server: Server, port: number): Promise<void> {
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
}
