/** What a started part needs to stop, undone in the reverse of the order it was started. */
export class Teardown {
  readonly #steps: (() => Promise<unknown>)[] = [];

  add(step: () => Promise<unknown>): void {
    this.#steps.push(step);
  }

  /** Waits for `started` and, once it is up, registers how to stop it. */
  track<T>(started: Promise<T>, stop: (value: T) => Promise<unknown>): Promise<T> {
    return started.then((value) => {
      this.add(() => stop(value));
      return value;
    });
  }

  /** Runs every step, newest first; a failing step does not keep the others from running. */
  async run(): Promise<void> {
    for (const step of this.#steps.splice(0).reverse()) await step().catch(() => undefined);
  }
}
