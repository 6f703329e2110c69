/**
 * The provider's catalogue through the official SDK: `GET /v1/models/{id}` (`models.retrieve`).
 * Its `shutdown_date` (YYYY-MM-DD, or null while none is announced) is not in the SDK's `Model`
 * type yet; the SDK hands the JSON through, so it is read from the object as sent.
 */
import OpenAI from "openai";
import type { Catalogue } from "../model-watch.ts";

export function createCatalogue(options: {
  apiKey: string;
  baseURL?: string | undefined;
  timeoutMs?: number;
}): Catalogue {
  const client = new OpenAI({
    apiKey: options.apiKey,
    baseURL: options.baseURL,
    timeout: options.timeoutMs ?? 10_000,
    maxRetries: 1,
  });
  return {
    async retrieve(model) {
      try {
        const m = (await client.models.retrieve(model)) as { shutdown_date?: unknown };
        const date = m.shutdown_date;
        return {
          listed: true,
          shutdownDate: typeof date === "string" && /^\d{4}-\d{2}-\d{2}$/.test(date) ? date : null,
        };
      } catch (error) {
        if (error instanceof OpenAI.APIError && error.status === 404) return { listed: false };
        throw error;
      }
    },
  };
}
