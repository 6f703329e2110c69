/**
 * What a schema can cost to check an answer against, decided before anything is reserved
 * (docs/DESIGN.md#job-kinds). Ajv checks `anyOf` branch after branch and `$ref` by calling the
 * target, with no memo: a value is checked once for every way the schema can reach it. Three
 * rules keep that count bounded, so a check is linear in the answer's size:
 *
 * 1. No reference cycle without a value step: a `$ref` (or `anyOf` branch) that leads back to its
 *    own schema before passing through an object property or array item has no finite value, and
 *    Ajv recurses on it until the stack overflows.
 * 2. One recursive branch per step: at each value of the answer, for each property (or array
 *    item), at most one of the schemas checking that value may lead back into recursion through
 *    it. Two or more make the count grow with the answer's depth: (branches)^depth.
 * 3. A cap on the rest: the schemas one value is checked against, multiplied out through anyOf
 *    branches and chains of references, are at most {@link MAX_SCHEMA_APPLICATIONS}.
 *
 * The walk follows `$ref`s over the whole schema (every definition, referenced or not), with
 * memos: each schema node is visited a bounded number of times, so this is polynomial in the
 * 16 KiB schema. It runs only on a schema that passed every other check (its `$ref`s resolve).
 */

/**
 * The most schemas one value of an answer may be checked against (anyOf branches, `$ref`
 * targets and the schemas that hold them, multiplied along the way). OpenAI's documented
 * examples need under 10.
 */
export const MAX_SCHEMA_APPLICATIONS = 64;

/** Every rule, or rule 1 alone (what compiling the schema needs: lib/kinds/json-schema.ts). */
export type CostRules = "all" | "cycles";

type Node = Record<string, unknown>;
type Add = (segments: readonly string[], message: string) => void;

interface Info {
  node: Node;
  segments: string[];
  /** Schemas applied to the same value: `$ref`'s target, each `anyOf` branch. */
  same: { to: Node; via: string[] }[];
  /** Schemas applied to a child value, by label: `.name` for a property, `[]` for items. */
  steps: Map<string, Node>;
}

const isNode = (value: unknown): value is Node =>
  value !== null && typeof value === "object" && !Array.isArray(value);

const ITEMS = "[]";
const labelName = (label: string) => (label === ITEMS ? "its items" : `"${label.slice(1)}"`);

/** Every schema node of `root` with its edges (no recursion: an explicit stack). */
function graph(root: Node): Map<Node, Info> {
  const defs = isNode(root.$defs) ? root.$defs : {};
  const infos = new Map<Node, Info>();
  const todo: [unknown, string[]][] = [[root, []]];
  for (const [name, def] of Object.entries(defs)) todo.push([def, ["$defs", name]]);
  for (let next = todo.pop(); next !== undefined; next = todo.pop()) {
    const [node, segments] = next;
    if (!isNode(node) || infos.has(node)) continue;
    const info: Info = { node, segments, same: [], steps: new Map() };
    infos.set(node, info);
    if (typeof node.$ref === "string") {
      const target = node.$ref === "#" ? root : defs[node.$ref.slice("#/$defs/".length)];
      if (isNode(target)) info.same.push({ to: target, via: [...segments, "$ref"] });
    }
    if (Array.isArray(node.anyOf)) {
      node.anyOf.forEach((branch, i) => {
        const via = [...segments, "anyOf", String(i)];
        if (isNode(branch)) info.same.push({ to: branch, via });
        todo.push([branch, via]);
      });
    }
    if (isNode(node.properties)) {
      for (const [key, child] of Object.entries(node.properties)) {
        if (isNode(child)) info.steps.set(`.${key}`, child);
        todo.push([child, [...segments, "properties", key]]);
      }
    }
    if (isNode(node.items)) {
      info.steps.set(ITEMS, node.items);
      todo.push([node.items, [...segments, "items"]]);
    }
  }
  return infos;
}

/**
 * The problems of rules 1 to 3 (module comment), each at its path in the schema.
 * @example checkEvaluationCost({ type: "object", properties: {}, required: [], additionalProperties: false }, add) // adds nothing
 */
export function checkEvaluationCost(root: Node, add: Add, rules: CostRules = "all"): void {
  const infos = graph(root);
  const info = (node: Node) => infos.get(node) as Info;
  if (!checkCycles(infos, add) || rules === "cycles") return;

  // Which nodes lead back into recursion: those that can reach a cycle of the graph (every
  // cycle passes through a value step now). Tarjan's strongly connected components, iterative.
  const cyclic = cyclicNodes(infos);
  const reverse = new Map<Node, Node[]>();
  for (const [node, i] of infos) {
    for (const to of [...i.same.map((s) => s.to), ...i.steps.values()]) {
      const from = reverse.get(to) ?? [];
      from.push(node);
      reverse.set(to, from);
    }
  }
  const recursive = new Set<Node>(cyclic);
  const queue = [...cyclic];
  for (let node = queue.pop(); node !== undefined; node = queue.pop()) {
    for (const from of reverse.get(node) ?? []) {
      if (!recursive.has(from)) {
        recursive.add(from);
        queue.push(from);
      }
    }
  }

  // Schemas applied to one value from `node`: itself and, through $ref and anyOf, the rest.
  const applied = new Map<Node, number>();
  const applications = (node: Node): number => {
    const known = applied.get(node);
    if (known !== undefined) return known;
    let n = 1;
    for (const { to } of info(node).same)
      n = Math.min(Number.MAX_SAFE_INTEGER, n + applications(to));
    applied.set(node, n);
    return n;
  };

  // Rule 2: per label, how many of the schemas applied from `node` step into recursion.
  const recursiveSteps = new Map<Node, Map<string, number>>();
  const stepsInto = (node: Node): Map<string, number> => {
    const known = recursiveSteps.get(node);
    if (known) return known;
    const counts = new Map<string, number>();
    for (const [label, child] of info(node).steps) if (recursive.has(child)) counts.set(label, 1);
    for (const { to } of info(node).same) {
      for (const [label, n] of stepsInto(to)) {
        counts.set(label, Math.min(Number.MAX_SAFE_INTEGER, (counts.get(label) ?? 0) + n));
      }
    }
    recursiveSteps.set(node, counts);
    return counts;
  };
  for (const [node, i] of infos) {
    for (const [label, n] of stepsInto(node)) {
      // Reported where the count is first above 1, not again at every schema that holds it.
      if (n < 2 || i.same.some(({ to }) => (stepsInto(to).get(label) ?? 0) >= 2)) continue;
      add(
        i.segments,
        `Here ${n} schemas (anyOf branches or $ref targets) would each check ${labelName(label)} and lead back into recursion: checking an answer would take time exponential in its depth. Let one branch recurse through it, or give the branches different property names.`,
      );
    }
  }

  // Rule 3: the schemas one value is checked against, multiplied out along non-recursive steps
  // (a recursive step counts its own applications: rule 2 keeps it to one chain).
  const worst = new Map<Node, number>();
  const sums = new Map<Node, Map<string, number>>();
  const stepSums = (node: Node): Map<string, number> => {
    const known = sums.get(node);
    if (known) return known;
    const total = new Map<string, number>();
    for (const [label, child] of info(node).steps) {
      total.set(label, recursive.has(child) ? applications(child) : worstAt(child));
    }
    for (const { to } of info(node).same) {
      for (const [label, n] of stepSums(to)) {
        total.set(label, Math.min(Number.MAX_SAFE_INTEGER, (total.get(label) ?? 0) + n));
      }
    }
    sums.set(node, total);
    return total;
  };
  const worstAt = (node: Node): number => {
    const known = worst.get(node);
    if (known !== undefined) return known;
    const n = Math.max(applications(node), ...stepSums(node).values());
    worst.set(node, n);
    return n;
  };
  // Reported once, where it is first above the cap: the schema with the fewest above it.
  let first: Info | undefined;
  for (const [node, i] of infos) {
    const n = worstAt(node);
    if (n > MAX_SCHEMA_APPLICATIONS && (first === undefined || n < worstAt(first.node))) first = i;
  }
  if (first !== undefined) {
    const n = worstAt(first.node);
    add(
      first.segments,
      `One value of the answer would be checked against ${n >= Number.MAX_SAFE_INTEGER ? "too many" : n} schemas from here (anyOf branches and $ref targets, multiplied out); at most ${MAX_SCHEMA_APPLICATIONS}. Use fewer branches, or nest fewer anyOf.`,
    );
  }
}

/**
 * Rule 1: `$ref` and `anyOf` edges (same value) must not form a cycle. Depth-first, iterative.
 * @returns whether there was none.
 */
function checkCycles(infos: Map<Node, Info>, add: Add): boolean {
  const state = new Map<Node, "open" | "done">();
  let clean = true;
  for (const start of infos.keys()) {
    if (state.has(start)) continue;
    const stack: { node: Node; next: number }[] = [{ node: start, next: 0 }];
    state.set(start, "open");
    while (stack.length > 0) {
      const top = stack[stack.length - 1] as { node: Node; next: number };
      const edge = (infos.get(top.node) as Info).same[top.next++];
      if (edge === undefined) {
        state.set(top.node, "done");
        stack.pop();
      } else if (state.get(edge.to) === "open") {
        clean = false;
        add(
          edge.via,
          "This $ref leads back to the schema it is in without passing through an object property or array item: a reference cycle, which checking an answer would follow until it crashes. Put an object or array between the two.",
        );
      } else if (!state.has(edge.to)) {
        state.set(edge.to, "open");
        stack.push({ node: edge.to, next: 0 });
      }
    }
  }
  return clean;
}

/** The nodes on a cycle of the whole graph (Tarjan's algorithm, iterative). */
function cyclicNodes(infos: Map<Node, Info>): Node[] {
  const edges = (node: Node) => {
    const i = infos.get(node) as Info;
    return [...i.same.map((s) => s.to), ...i.steps.values()];
  };
  const index = new Map<Node, number>();
  const low = new Map<Node, number>();
  const onStack = new Set<Node>();
  const stack: Node[] = [];
  const cyclic: Node[] = [];
  let counter = 0;
  for (const start of infos.keys()) {
    if (index.has(start)) continue;
    const frames: { node: Node; out: Node[]; next: number }[] = [];
    const open = (node: Node) => {
      index.set(node, counter);
      low.set(node, counter++);
      stack.push(node);
      onStack.add(node);
      frames.push({ node, out: edges(node), next: 0 });
    };
    open(start);
    while (frames.length > 0) {
      const frame = frames[frames.length - 1] as { node: Node; out: Node[]; next: number };
      const to = frame.out[frame.next++];
      if (to !== undefined) {
        if (!index.has(to)) open(to);
        else if (onStack.has(to))
          low.set(frame.node, Math.min(low.get(frame.node) ?? 0, index.get(to) ?? 0));
        continue;
      }
      frames.pop();
      const parent = frames[frames.length - 1];
      if (parent)
        low.set(parent.node, Math.min(low.get(parent.node) ?? 0, low.get(frame.node) ?? 0));
      if (low.get(frame.node) !== index.get(frame.node)) continue;
      const component: Node[] = [];
      for (let n = stack.pop(); n !== undefined; n = stack.pop()) {
        onStack.delete(n);
        component.push(n);
        if (n === frame.node) break;
      }
      if (component.length > 1 || edges(frame.node).includes(frame.node)) cyclic.push(...component);
    }
  }
  return cyclic;
}
