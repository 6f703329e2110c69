/**
 * The Upstash-Retry-Delay language: arithmetic in milliseconds over one variable, `retried`
 * (0 before the first retry), with pow, sqrt, abs, exp, floor, ceil, round, min and max.
 * A tiny recursive-descent parser; nothing is ever passed to eval.
 */
export class ExpressionError extends Error {
  override name = "ExpressionError";
}

type Token =
  | { kind: "num"; value: number }
  | { kind: "id"; name: string }
  | { kind: "op"; op: string };

const functions: Record<string, (...args: number[]) => number> = {
  pow: (a = Number.NaN, b = Number.NaN) => a ** b,
  sqrt: Math.sqrt,
  abs: Math.abs,
  exp: Math.exp,
  floor: Math.floor,
  ceil: Math.ceil,
  round: Math.round,
  min: Math.min,
  max: Math.max,
};

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  const pattern = /\s*(?:(\d+(?:\.\d+)?(?:e[+-]?\d+)?)|([A-Za-z_]\w*)|(\*\*|[-+*/%^(),]))/y;
  let index = 0;
  while (index < source.length) {
    if (/^\s+$/.test(source.slice(index))) break;
    pattern.lastIndex = index;
    const match = pattern.exec(source);
    if (!match)
      throw new ExpressionError(
        `unexpected character at ${index}: ${source.slice(index, index + 10)}`,
      );
    index = pattern.lastIndex;
    if (match[1] !== undefined) tokens.push({ kind: "num", value: Number(match[1]) });
    else if (match[2] !== undefined) tokens.push({ kind: "id", name: match[2] });
    else tokens.push({ kind: "op", op: match[3] ?? "" });
  }
  return tokens;
}

/** Parses once; the result evaluates for any `retried`. Throws ExpressionError on bad input. */
export function compileExpression(source: string): (retried: number) => number {
  const tokens = tokenize(source);
  if (tokens.length === 0) throw new ExpressionError("empty expression");
  let pos = 0;
  const peekOp = (): string | undefined => {
    const t = tokens[pos];
    return t?.kind === "op" ? t.op : undefined;
  };
  const expect = (op: string) => {
    if (peekOp() !== op) throw new ExpressionError(`expected "${op}"`);
    pos++;
  };

  type Node = (retried: number) => number;
  const additive = (): Node => {
    let left = multiplicative();
    for (let op = peekOp(); op === "+" || op === "-"; op = peekOp()) {
      pos++;
      const l = left;
      const r = multiplicative();
      left = op === "+" ? (x) => l(x) + r(x) : (x) => l(x) - r(x);
    }
    return left;
  };
  const multiplicative = (): Node => {
    let left = unary();
    for (let op = peekOp(); op === "*" || op === "/" || op === "%"; op = peekOp()) {
      pos++;
      const l = left;
      const r = unary();
      left = op === "*" ? (x) => l(x) * r(x) : op === "/" ? (x) => l(x) / r(x) : (x) => l(x) % r(x);
    }
    return left;
  };
  const unary = (): Node => {
    const op = peekOp();
    if (op === "-" || op === "+") {
      pos++;
      const inner = unary();
      return op === "-" ? (x) => -inner(x) : inner;
    }
    return power();
  };
  const power = (): Node => {
    const base = primary();
    const op = peekOp();
    if (op === "^" || op === "**") {
      pos++;
      const exponent = unary();
      return (x) => base(x) ** exponent(x);
    }
    return base;
  };
  const primary = (): Node => {
    const token = tokens[pos++];
    if (!token) throw new ExpressionError("unexpected end of expression");
    if (token.kind === "num") return () => token.value;
    if (token.kind === "op") {
      if (token.op !== "(") throw new ExpressionError(`unexpected "${token.op}"`);
      const inner = additive();
      expect(")");
      return inner;
    }
    if (token.name === "retried") return (x) => x;
    const fn = functions[token.name];
    if (!fn) throw new ExpressionError(`unknown identifier "${token.name}"`);
    expect("(");
    const args: Node[] = [];
    if (peekOp() !== ")") {
      args.push(additive());
      while (peekOp() === ",") {
        pos++;
        args.push(additive());
      }
    }
    expect(")");
    return (x) => fn(...args.map((a) => a(x)));
  };

  const root = additive();
  if (pos !== tokens.length) throw new ExpressionError("unexpected trailing input");
  return root;
}
