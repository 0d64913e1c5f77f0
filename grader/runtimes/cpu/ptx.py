"""Inline PTX for the emulator: each `asm(...)` statement of a kernel, read and rewritten as C++.

A tensor-core kernel reaches the hardware through a few PTX instructions in `asm` statements. The
emulator runs exactly this subset, with the register layouts of the PTX ISA (csrc/emu/mma.h,
csrc/emu/async_copy.h, emu_runtime.cpp):

    mma.sync.aligned.m16n8k16.row.col.f32.{f16.f16|bf16.bf16}.f32   {d0..d3}, {a0..a3}, {b0,b1}, {c0..c3}
    mma.sync.aligned.m16n8k8.row.col.f32.{f16.f16|bf16.bf16}.f32    {d0..d3}, {a0,a1}, {b0}, {c0..c3}
    ldmatrix.sync.aligned.m8n8.{x1|x2|x4}{.trans}{.shared{::cta}}.b16  {r..}, [addr]
    cp.async.{ca|cg}.shared{::cta}.global{.L2::64B|128B|256B}{.L2::cache_hint}
                                                    [dst], [src], size{, src-size}{, policy}
    cp.async.commit_group   cp.async.wait_group N   cp.async.wait_all
    cvta.to.shared{::cta}.{u32|u64}   cvta.shared{::cta}.{u32|u64}   cvta{.to}.global.u64
    cvt.u32.u64   cvt.u64.u32
    mov.b32 d, {lo, hi}   mov.b32 {lo, hi}, s   mov.{b,u,s}{16,32,64} d, s   (also of %laneid)
    cvt.rn.{f16|bf16}x2.f32 d, a, b (a to the upper half)   cvt.rn.{f16|bf16}.f32   cvt.f32.{f16|bf16}
    setp.{eq|ne}.{b32|u32|s32} p, a, b   selp.{b32|u32|s32} d, a, b, p
                                         with `.reg` declarations and `@p` / `@!p` guards
    sm_90a (module 10; csrc/emu/hopper.h, csrc/hopper.inc):
    wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16.f16|bf16.bf16}  {d..}, a-desc|{a0..a3}, b-desc, scale-d, ...
    wgmma.fence / commit_group / wait_group N .sync.aligned   setmaxnreg.{inc|dec}.sync.aligned.u32 N
    mbarrier.init / arrive{.expect_tx} / expect_tx / complete_tx / {try,test}_wait.parity .shared::cta.b64
    cp.async.bulk.tensor.{1..5}d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map, {c..}], [bar]
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar]
    cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src], size
    cp.async.bulk.commit_group   cp.async.bulk.wait_group{.read} N
    fence.proxy.async{.shared::cta}   fence.mbarrier_init.release.cluster   bar.{sync|arrive} id{, count}
    an empty template (a compiler barrier: asm volatile("" ::: "memory"))

Anything else is refused at compile time, naming the instruction and the student's line.

The rewrite keeps every line where it was: the statement `asm volatile("..." : outs : ins);`
becomes, on the line of its `asm` keyword, a block that copies each operand into a 64-bit local
(its register), runs the instructions on the locals (calls into csrc/emu/) and stores the outputs
back, followed by as many newlines as the statement had:

    do { __cudaemu_ptx::u64 __cudaemu_a0 = __cudaemu_ptx::UNSET, ...,
         __cudaemu_a4 = __cudaemu_ptx::r(a[0]), ...; <instructions>;
         __cudaemu_ptx::store<4>(&(d[0]), __cudaemu_a0); ... } while (0)

Operands: constraints "r" "f" "l" "h" "d" "n" "i", with "=", "+", "&" and matching digits;
placeholders %0 .. %N (named operands, %[name], are refused: NVCC does not support them); %% for a
literal %. The template must be string literals (adjacent ones are joined), not a macro.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Callable

# The start of an asm statement, in code whose comments and strings are blanked.
ASM_START = re.compile(
    r"\b(?:asm|__asm__|__asm)\b((?:\s*(?:volatile|__volatile__|inline|__inline__|goto)\b)*)\s*\(")

SUPPORTED = (
    "mma.sync.aligned.m16n8k16 / m16n8k8 .row.col.f32.{f16.f16|bf16.bf16}.f32, "
    "ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16, "
    "cp.async.{ca,cg}.shared.global (4/8/16 bytes, optional src-size), cp.async.commit_group, "
    "cp.async.wait_group N, cp.async.wait_all, cvta.to.shared, cvt.u32.u64, mov.b32 (packing two "
    "16-bit halves), cvt.rn.{f16,bf16}x2.f32, setp.{eq,ne} and selp with @p guards; for sm_90a: "
    "wgmma.mma_async m64nNk16 (f16/bf16, f32), wgmma.fence / commit_group / wait_group, "
    "mbarrier.{init,arrive,arrive.expect_tx,expect_tx,complete_tx,try_wait.parity,test_wait.parity}, "
    "cp.async.bulk.tensor.Nd and cp.async.bulk (global to shared, mbarrier::complete_tx::bytes), "
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32, cp.async.bulk.commit_group / "
    "wait_group{.read} N, "
    "fence.proxy.async, "
    "fence.mbarrier_init, bar.sync / bar.arrive id, count, setmaxnreg")


class AsmError(Exception):
    """Something in an asm statement the emulator cannot run; ``pos`` is its offset in the source."""

    def __init__(self, pos: int, message: str):
        super().__init__(message)
        self.pos = pos
        self.message = message


@dataclass
class Operand:
    index: int
    name: str | None
    constraint: str       # as written: "=r", "+f", "r", "n", "0" ...
    kind: str             # r f l h d n, or the output's kind for a matching digit
    expr: str             # the C++ expression, on one line
    output: bool
    inout: bool = False
    tied_to: int | None = None   # an input tied to output `tied_to` by a digit constraint
    pos: int = 0


@dataclass
class AsmStatement:
    start: int            # the `asm` keyword
    end: int              # one past the closing parenthesis
    template: str         # the joined string literals, escapes decoded
    tpos: list[int]       # for each template character, its offset in the source
    operands: list[Operand] = field(default_factory=list)
    # A template with macros in it (`"mma...f32." TYPES ".f32 ..."`, TYPES defined as a string in
    # the source, perhaps under #if): one (conditions, template, tpos) per combination of the
    # macros' definitions; conditions are (macro, its literal text) pairs.
    variants: list[tuple[list[tuple[str, str]], str, list[int]]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Reading the statement.

def _blank(m: re.Match) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def strip_comments(src: str) -> str:
    """Comments blanked (newlines kept), strings kept."""
    pattern = r'//[^\n]*|/\*.*?\*/|("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')'
    return re.sub(pattern, lambda m: m.group(0) if m.group(1) else _blank(m), src, flags=re.S)


def _matching(code: str, open_pos: int) -> int:
    """The offset of the bracket closing the one at ``open_pos`` (in comment/string-free code)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for i in range(open_pos, len(code)):
        c = code[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


def _split_top(code: str, lo: int, hi: int, sep: str) -> list[tuple[int, int]]:
    """Spans of code[lo:hi] split at ``sep`` characters outside brackets."""
    depth, start, out = 0, lo, []
    for i in range(lo, hi):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            out.append((start, i))
            start = i + 1
    out.append((start, hi))
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def _decode(literal: str, base: int) -> tuple[str, list[int]]:
    """The characters of a C string literal's body and the source offset of each."""
    out, pos, i = [], [], 0
    while i < len(literal):
        c = literal[i]
        n = 1
        if c == "\\" and i + 1 < len(literal):
            m = re.match(r"x([0-9a-fA-F]+)|([0-7]{1,3})", literal[i + 1:])
            if m:
                c = chr(int(m.group(1), 16) & 0xFF if m.group(1) else int(m.group(2), 8))
                n = 1 + len(m.group(0))
            else:
                c = _ESCAPES.get(literal[i + 1], literal[i + 1])
                n = 2
        out.append(c)
        pos.append(base + i)
        i += n
    return "".join(out), pos


_CONSTRAINT = re.compile(r"^([=+&]*)([a-zA-Z]|\d+)$")


def _parse_operand(src: str, code: str, exprs: str, lo: int, hi: int, index: int,
                   output: bool) -> Operand:
    text = src[lo:hi]
    m = re.match(r'\s*(?:\[\s*([A-Za-z_]\w*)\s*\]\s*)?"([^"]*)"\s*\(', text)
    if not m:
        raise AsmError(lo, f"cannot read asm operand `{' '.join(text.split())}`: expected "
                           '"constraint"(expression)')
    open_pos = lo + m.end() - 1
    close = _matching(code, open_pos)
    if close < 0 or src[close + 1:hi].strip():
        raise AsmError(lo, f"cannot read asm operand `{' '.join(text.split())}`")
    expr = " ".join(exprs[open_pos + 1:close].split())
    constraint = m.group(2).strip()
    cm = _CONSTRAINT.match(constraint)
    if not cm:
        raise AsmError(lo, f'asm operand constraint "{constraint}" is not one the emulator knows '
                           '(it knows "r", "f", "l", "h", "d", "n", "i", with "=", "+", "&", and '
                           "a digit for a tied input)")
    mods, kind = cm.group(1), cm.group(2)
    op = Operand(index, m.group(1), constraint, kind, expr, output, inout="+" in mods, pos=lo)
    if output:
        if "=" not in mods and "+" not in mods:
            raise AsmError(lo, f'asm output operand "{constraint}" needs "=" or "+"')
        if kind.isdigit() or op.kind not in "rflhd":
            raise AsmError(lo, f'asm output operand "{constraint}": the emulator knows "=r", "=f", '
                               '"=l", "=h", "=d" (and "+")')
    else:
        if mods.replace("&", ""):
            raise AsmError(lo, f'asm input operand "{constraint}" may not have "=" or "+"')
        if kind.isdigit():
            op.tied_to = int(kind)
        elif op.kind not in "rflhdni":
            raise AsmError(lo, f'asm input operand constraint "{constraint}" is not one the '
                               'emulator knows ("r", "f", "l", "h", "d", "n", "i")')
        if op.kind == "i":
            op.kind = "n"
    return op


def strip_code_for_brackets(src: str) -> str:
    """Strings and comments blanked: brackets inside them do not count."""
    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, _blank, src, flags=re.S)


def find_statements(source: str, code: str | None = None) -> list[AsmStatement]:
    """Every asm statement of ``source`` (``code``: the source with comments and strings blanked)."""
    # Line continuations (an asm in a macro) read as spaces; offsets and newlines stay.
    source = source.replace("\\\n", " \n")
    code = strip_code_for_brackets(source) if code is None else code.replace("\\\n", " \n")
    exprs = strip_comments(source)
    # Object-like macros whose definition is string literals: name -> [(text, literal source)].
    macros: dict[str, list[tuple[str, str]]] = {}
    for d in re.finditer(r'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+'
                         r'((?:"(?:\\.|[^"\\\n])*"[ \t]*)+)$', exprs, re.M):
        text = "".join(_decode(lit, 0)[0] for lit in re.findall(r'"((?:\\.|[^"\\\n])*)"', d.group(2)))
        value = (text, d.group(2).strip())
        if value not in macros.setdefault(d.group(1), []):
            macros[d.group(1)].append(value)
    out = []
    for m in ASM_START.finditer(code):
        quals = m.group(1) or ""
        if "goto" in quals:
            raise AsmError(m.start(), "`asm goto` is not supported by the CPU emulator")
        open_pos = m.end() - 1
        close = _matching(code, open_pos)
        if close < 0:
            raise AsmError(m.start(), "cannot find the end of this asm statement (unbalanced "
                                      "parentheses)")
        if re.search(r"\n\s*#", code[m.start():close]):
            raise AsmError(m.start(), "a preprocessor directive inside an asm statement is not "
                                      "supported by the CPU emulator: write one asm per branch")
        sections = _split_top(code, open_pos + 1, close, ":")
        if len(sections) > 4:
            raise AsmError(m.start(), "`asm goto` labels are not supported by the CPU emulator")
        tlo, thi = sections[0]
        pieces = []   # ("lit", text, positions) or ("macro", name, position)
        for tok in re.finditer(r'"((?:\\.|[^"\\\n])*)"|([A-Za-z_]\w*)|(\S)', exprs[tlo:thi]):
            if tok.group(1) is not None:
                text, pos = _decode(tok.group(1), tlo + tok.start(1))
                pieces.append(("lit", text, pos))
            elif tok.group(2) and tok.group(2) in macros:
                pieces.append(("macro", tok.group(2), tlo + tok.start(2)))
            else:
                raise AsmError(tlo + tok.start(), "the emulator reads asm templates made of string "
                                                  "literals, and macros #defined in the kernel as "
                                                  f"string literals; not `{tok.group(0)}`")
        variants = []
        names = sorted({p[1] for p in pieces if p[0] == "macro"})
        for combo in itertools.product(*[macros[nm] for nm in names]):
            chosen = dict(zip(names, combo))
            template, tpos = [], []
            for p in pieces:
                if p[0] == "lit":
                    template.append(p[1])
                    tpos.extend(p[2])
                else:
                    text = chosen[p[1]][0]
                    template.append(text)
                    tpos.extend([p[2]] * len(text))
            variants.append(([(nm, chosen[nm][1]) for nm in names], "".join(template), tpos))
        stmt = AsmStatement(m.start(), close + 1, variants[0][1], variants[0][2],
                            variants=variants)
        index = 0
        for sec, output in ((1, True), (2, False)):
            if sec >= len(sections):
                break
            lo, hi = sections[sec]
            if not code[lo:hi].strip():
                continue
            for a, b in _split_top(code, lo, hi, ","):
                stmt.operands.append(_parse_operand(source, code, exprs, a, b, index, output))
                index += 1
        if len(sections) > 3:
            for a, b in _split_top(code, *sections[3], ","):
                if not source[a:b].strip():
                    continue
                if not re.fullmatch(r'\s*"[^"]*"\s*', source[a:b]):
                    raise AsmError(a, "cannot read the asm clobber list")
        outputs = [o for o in stmt.operands if o.output]
        for o in stmt.operands:
            if o.tied_to is not None:
                if o.tied_to >= len(outputs):
                    raise AsmError(o.pos, f'asm input "{o.constraint}" names output {o.tied_to}, '
                                          "which does not exist")
                o.kind = outputs[o.tied_to].kind
        out.append(stmt)
    return out


# ---------------------------------------------------------------------------------------------
# The template: placeholders, statements, operands.

_MARK = "\x01"   # %N becomes \x01N\x02 while the template is parsed


def _substitute(stmt: AsmStatement, t: str, tp: list[int]) -> tuple[str, list[int]]:
    """The template with %N as markers and %% as %; the source offset of each char."""
    out, pos, i = [], [], 0
    while i < len(t):
        c = t[i]
        if c == "%":
            m = re.match(r"%(?:(\d+)|\[\s*([A-Za-z_]\w*)\s*\]|(%)|(=))", t[i:])
            if not m:
                out.append(c)
                pos.append(tp[i])
                i += 1
                continue
            if m.group(3):
                out.append("%")
                pos.append(tp[i])
            elif m.group(4):
                raise AsmError(tp[i], "`%=` in an asm template is not supported by the CPU emulator")
            else:
                if m.group(1) is None:
                    # GCC accepts these; NVCC does not ("symbolic operand reference not supported").
                    raise AsmError(tp[i], f"asm template names %[{m.group(2)}]: CUDA's compiler "
                                          "does not support named asm operands; use %0, %1 ...")
                k = int(m.group(1))
                if k >= len(stmt.operands):
                    raise AsmError(tp[i], f"asm template uses %{k}, but the statement has "
                                          f"{len(stmt.operands)} operand(s)")
                mark = f"{_MARK}{k}\x02"
                out.append(mark)
                pos.extend([tp[i]] * len(mark))
            i += len(m.group(0))
            continue
        out.append(c)
        pos.append(tp[i])
        i += 1
    return "".join(out), pos


def _statements(text: str, pos: list[int]) -> list[tuple[str, int]]:
    """The template's statements (`{` and `}` of scopes dropped, `//` comments removed), each
    with the source offset of its first character."""
    # Comments: blank them, keeping offsets.
    text = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: " " * len(m.group(0)), text, flags=re.S)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace() or c in "{};":
            i += 1
            continue
        j = text.find(";", i)
        if j < 0:
            j = n
        body = text[i:j]
        # A statement ends at ';'; a '}' with no vector '{' open before it closes a scope.
        depth, cut = 0, len(body)
        for k, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth < 0:
                    cut = k
                    break
        body = body[:cut]
        if body.strip():
            out.append((" ".join(body.split()), pos[i] if i < len(pos) else 0))
        i = i + cut if cut < len(text[i:j]) else j + 1
    return out


@dataclass
class _Ctx:
    stmt: AsmStatement
    regs: dict[str, str]          # local register name -> its type (".b32", ".pred" ...)
    pos: int
    text: str

    def err(self, message: str) -> AsmError:
        return AsmError(self.pos, message)


def _op_local(ctx: _Ctx, k: int) -> str:
    o = ctx.stmt.operands[k]
    if o.tied_to is not None:
        k = [x for x in ctx.stmt.operands if x.output][o.tied_to].index
    return f"__cudaemu_a{k}"


def _parse_value(ctx: _Ctx, tok: str):
    """One operand token: ('op', k) | ('reg', name) | ('imm', int) | ('vec', [...]) |
    ('addr', base, offset) | ('laneid',)."""
    tok = tok.strip()
    if tok.startswith("{") and tok.endswith("}"):
        inner = tok[1:-1].strip()
        return ("vec", [_parse_value(ctx, t) for t in inner.split(",")] if inner else [])
    if tok == "_":
        return ("sink",)
    if tok.startswith("[") and tok.endswith("]") and "," in tok:
        # A tensor operand of cp.async.bulk.tensor: [map, {c0, c1, ...}].
        inner = tok[1:-1].strip()
        cut = inner.find(",")
        coords = _parse_value(ctx, inner[cut + 1:].strip())
        if coords[0] != "vec":
            raise ctx.err(f"cannot read the tensor operand `{_readable(tok)}`: [map, {{coordinates}}]")
        return ("tensor", _parse_value(ctx, inner[:cut]), coords[1])
    if tok.startswith("[") and tok.endswith("]"):
        inner = tok[1:-1].replace(" ", "")
        m = re.fullmatch(r"(.+?)(?:([+-])(0x[0-9a-fA-F]+|\d+))?", inner)
        base = _parse_value(ctx, m.group(1))
        off = int(m.group(3), 0) * (-1 if m.group(2) == "-" else 1) if m.group(3) else 0
        if base[0] not in ("op", "reg", "imm"):
            raise ctx.err(f"cannot read the address `{tok}`")
        return ("addr", base, off)
    m = re.fullmatch(_MARK + r"(\d+)\x02", tok)
    if m:
        return ("op", int(m.group(1)))
    m = re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", tok)
    if m:
        return ("imm", int(tok.rstrip("uU"), 0))
    m = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", tok)
    if m:
        return ("imm", int(m.group(1), 16))
    if tok == "%laneid":
        return ("laneid",)
    m = re.fullmatch(r"[A-Za-z_$][\w$]*", tok)
    if m:
        if tok not in ctx.regs:
            raise ctx.err(f"`{tok}` is not a register this asm declares (.reg) nor an operand")
        return ("reg", tok)
    raise ctx.err(f"cannot read the operand `{_readable(tok)}`")


def _src(ctx: _Ctx, v) -> str:
    kind = v[0]
    if kind == "op":
        return _op_local(ctx, v[1])
    if kind == "reg":
        return f"__cudaemu_r_{_cname(v[1])}"
    if kind == "imm":
        return f"{v[1] & 0xFFFFFFFFFFFFFFFF}ull"
    if kind == "laneid":
        return "(__cudaemu_ptx::u64)__cudaemu_ptx::laneid()"
    raise ctx.err(f"a {'vector' if kind == 'vec' else 'memory'} operand where a register is due "
                  f"in `{_readable(ctx.text)}`")


def _dst(ctx: _Ctx, v) -> str:
    kind = v[0]
    if kind == "op":
        o = ctx.stmt.operands[v[1]]
        if not o.output and o.tied_to is None:
            raise ctx.err(f"`{_readable(ctx.text)}` writes %{v[1]}, an input operand: declare it "
                          'as an output ("=r" / "+r")')
        return _op_local(ctx, v[1])
    if kind == "reg":
        return f"__cudaemu_r_{_cname(v[1])}"
    raise ctx.err(f"`{_readable(ctx.text)}` writes to something that is not a register")


def _cname(name: str) -> str:
    return name.replace("$", "_S_")


def _readable(text: str) -> str:
    return re.sub(_MARK + r"(\d+)\x02", r"%\1", text)


def _vec(ctx: _Ctx, v, n: int, what: str) -> list:
    if v[0] != "vec" or len(v[1]) != n:
        raise ctx.err(f"`{_readable(ctx.text)}`: {what} must be a vector of {n} registers "
                      f"{{...}}")
    return v[1]


def _split_operands(text: str) -> list[str]:
    depth, cur, out = 0, [], []
    for c in text:
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [o.strip() for o in out]


# Each handler: (ctx, regex match of the opcode, operand values) -> C++ statement.

def _mma(ctx, m, ops):
    k8 = m.group(1) == "m16n8k8"
    bf16 = m.group(2) == "bf16"
    if len(ops) != 4:
        raise ctx.err(f"`{_readable(ctx.text)}`: mma takes d, a, b, c")
    na, nb = (2, 1) if k8 else (4, 2)
    d = _vec(ctx, ops[0], 4, "d")
    a = _vec(ctx, ops[1], na, "a")
    b = _vec(ctx, ops[2], nb, "b")
    c = _vec(ctx, ops[3], 4, "c")
    av = [f"(unsigned)({_src(ctx, x)})" for x in a] + ["0u"] * (4 - na)
    bv = [f"(unsigned)({_src(ctx, x)})" for x in b] + ["0u"] * (2 - nb)
    cv = [f"(unsigned)({_src(ctx, x)})" for x in c]
    variant = (1 if bf16 else 0) | (2 if k8 else 0)
    stores = " ".join(f"{_dst(ctx, x)} = __cudaemu_m.d[{i}];" for i, x in enumerate(d))
    return (f"{{ __cudaemu_mma_lane __cudaemu_m = {{{{{', '.join(av)}}}, {{{', '.join(bv)}}}, "
            f"{{{', '.join(cv)}}}, {{0u, 0u, 0u, 0u}}}}; "
            f"__cudaemu_ptx::mma({variant}, &__cudaemu_m, __FILE__, __LINE__); {stores} }}")


def _address(ctx, v) -> str:
    if v[0] != "addr":
        raise ctx.err(f"`{_readable(ctx.text)}`: expected an address [reg]")
    base = _src(ctx, v[1])
    return f"({base} + {v[2] & 0xFFFFFFFFFFFFFFFF}ull)" if v[2] else base


def _ldmatrix(ctx, m, ops):
    num = int(m.group(1))
    trans = bool(m.group(2))
    shared = bool(m.group(3))
    if len(ops) != 2:
        raise ctx.err(f"`{_readable(ctx.text)}`: ldmatrix takes {{registers}}, [address]")
    regs = ops[0][1] if ops[0][0] == "vec" else [ops[0]]
    if len(regs) != num:
        raise ctx.err(f"`{_readable(ctx.text)}`: .x{num} loads {num} register(s), the "
                      f"instruction names {len(regs)}")
    addr = _address(ctx, ops[1])
    stores = " ".join(f"{_dst(ctx, x)} = __cudaemu_l[{i}];" for i, x in enumerate(regs))
    return (f"{{ unsigned __cudaemu_l[4]; __cudaemu_ptx::ldmatrix({num}, {int(trans)}, "
            f"{int(shared)}, {addr}, __cudaemu_l, __FILE__, __LINE__); {stores} }}")


def _cp_async(ctx, m, ops):
    cg = m.group(1) == "cg"
    hint = "cache_hint" in (m.group(2) or "")
    n = len(ops)
    if n < 3 or n > 5 or (n == 5 and not hint):
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.async takes [dst], [src], size, and optionally "
                      "src-size (and a cache policy with .L2::cache_hint)")
    if hint:
        ops = ops[:-1]   # the cache policy changes nothing here
    dst, src = _address(ctx, ops[0]), _address(ctx, ops[1])
    size = _src(ctx, ops[2])
    if ops[2][0] == "imm" and (ops[2][1] not in (4, 8, 16) or (cg and ops[2][1] != 16)):
        raise ctx.err(f"`{_readable(ctx.text)}`: the copy size must be 16 with .cg, or 4, 8 or "
                      "16 with .ca")
    src_size = "-1ll"
    if len(ops) == 4:
        if ops[3][0] == "reg" and ctx.regs.get(ops[3][1]) == ".pred":
            # The ignore-src form: a true predicate reads nothing (zero fill).
            src_size = f"({_src(ctx, ops[3])} ? 0ll : -1ll)"
        else:
            src_size = f"(long long)(unsigned)({_src(ctx, ops[3])})"
    return (f"__cudaemu_ptx::cp_async({int(cg)}, {dst}, {src}, {size}, {src_size}, __FILE__, "
            "__LINE__)")


def _no_operands(ctx, ops):
    if ops:
        raise ctx.err(f"`{_readable(ctx.text)}` takes no operands")


def _commit(ctx, m, ops):
    _no_operands(ctx, ops)
    return "__cudaemu_ptx::cp_async_commit()"


def _wait_group(ctx, m, ops):
    if len(ops) != 1 or ops[0][0] not in ("imm", "op"):
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.async.wait_group takes one number")
    return f"__cudaemu_ptx::cp_async_wait({_src(ctx, ops[0])}, __FILE__, __LINE__)"


def _wait_all(ctx, m, ops):
    _no_operands(ctx, ops)
    return "__cudaemu_ptx::cp_async_wait_all()"


def _two(ctx, ops, what):
    if len(ops) != 2:
        raise ctx.err(f"`{_readable(ctx.text)}`: {what} takes a destination and a source")
    return _dst(ctx, ops[0]), ops[1]


def _cvta(ctx, m, ops):
    d, s = _two(ctx, ops, "cvta")
    mask = "0xFFFFFFFFull" if m.group(3) == "u32" else "~0ull"
    fn = "cvta_to_shared" if m.group(1) else "cvta_shared"
    return f"{d} = __cudaemu_ptx::{fn}({_src(ctx, s)}, __FILE__, __LINE__) & {mask}"


def _cvta_global(ctx, m, ops):
    d, s = _two(ctx, ops, "cvta")
    return f"{d} = {_src(ctx, s)}"


def _cvt_int(ctx, m, ops):
    d, s = _two(ctx, ops, "cvt")
    return f"{d} = {_src(ctx, s)} & 0xFFFFFFFFull"


_MASKS = {"16": "0xFFFFull", "32": "0xFFFFFFFFull", "64": "~0ull"}


def _mov(ctx, m, ops):
    bits = m.group(1)
    if len(ops) != 2:
        raise ctx.err(f"`{_readable(ctx.text)}`: mov takes a destination and a source")
    d, s = ops
    if d[0] == "vec" or s[0] == "vec":
        # Packing / unpacking: the first element is the low half.
        if bits not in ("32", "64") or (d[0] == "vec") == (s[0] == "vec"):
            raise ctx.err(f"`{_readable(ctx.text)}`: the emulator packs two 16-bit values in "
                          "mov.b32 (or two 32-bit values in mov.b64)")
        half = int(bits) // 2
        hmask = "0xFFFFull" if half == 16 else "0xFFFFFFFFull"
        if s[0] == "vec":
            lo, hi = _vec(ctx, s, 2, "the source")
            return (f"{_dst(ctx, d)} = ({_src(ctx, lo)} & {hmask}) | (({_src(ctx, hi)} & {hmask}) "
                    f"<< {half})")
        lo, hi = _vec(ctx, d, 2, "the destination")
        tmp = f"__cudaemu_ptx::u64 __cudaemu_t = {_src(ctx, s)};"
        return (f"{{ {tmp} {_dst(ctx, lo)} = __cudaemu_t & {hmask}; "
                f"{_dst(ctx, hi)} = (__cudaemu_t >> {half}) & {hmask}; }}")
    return f"{_dst(ctx, d)} = {_src(ctx, s)} & {_MASKS[bits]}"


def _cvt_pack(ctx, m, ops):
    if len(ops) != 3:
        raise ctx.err(f"`{_readable(ctx.text)}` takes d, a, b (a goes to the upper half)")
    fn = "bf16x2" if m.group(1) == "bf16" else "f16x2"
    return (f"{_dst(ctx, ops[0])} = __cudaemu_ptx::{fn}({_src(ctx, ops[1])}, "
            f"{_src(ctx, ops[2])})")


def _cvt_narrow(ctx, m, ops):
    d, s = _two(ctx, ops, "cvt")
    fn = "to_bf16" if m.group(1) == "bf16" else "to_f16"
    return f"{d} = __cudaemu_ptx::{fn}({_src(ctx, s)})"


def _cvt_widen(ctx, m, ops):
    d, s = _two(ctx, ops, "cvt")
    fn = "from_bf16" if m.group(1) == "bf16" else "from_f16"
    return f"{d} = __cudaemu_ptx::{fn}({_src(ctx, s)})"


def _setp(ctx, m, ops):
    if len(ops) != 3 or ops[0][0] != "reg" or ctx.regs.get(ops[0][1]) != ".pred":
        raise ctx.err(f"`{_readable(ctx.text)}`: setp writes a .pred register this asm declares")
    cmp = "==" if m.group(1) == "eq" else "!="
    return (f"{_dst(ctx, ops[0])} = (unsigned)({_src(ctx, ops[1])}) {cmp} "
            f"(unsigned)({_src(ctx, ops[2])})")


# ---- Hopper (module 10): csrc/emu/hopper.h, csrc/hopper.inc -------------------------------------

def _mbar_init(ctx, m, ops):
    if len(ops) != 2:
        raise ctx.err(f"`{_readable(ctx.text)}`: mbarrier.init takes [address], count")
    return (f"__cudaemu_ptx::mbar_init({_address(ctx, ops[0])}, {_src(ctx, ops[1])}, __FILE__, "
            "__LINE__)")


def _mbar_arrive(ctx, m, ops):
    expect = bool(m.group(1))
    if len(ops) != (3 if expect else 2):
        raise ctx.err(f"`{_readable(ctx.text)}`: mbarrier.arrive{'.expect_tx' if expect else ''} "
                      f"takes a state register (or _), [address]{', tx-count' if expect else ''}"
                      " (the emulator does not run the arrive-count operand)")
    tx = _src(ctx, ops[2]) if expect else "0ull"
    call = (f"__cudaemu_ptx::mbar_arrive({_address(ctx, ops[1])}, {tx}, {int(expect)}, __FILE__, "
            "__LINE__)")
    return call if ops[0][0] == "sink" else f"{_dst(ctx, ops[0])} = {call}"


def _mbar_tx(ctx, m, ops):
    if len(ops) != 2:
        raise ctx.err(f"`{_readable(ctx.text)}` takes [address], tx-count")
    complete = int(m.group(1) == "complete_tx")
    return (f"__cudaemu_ptx::mbar_tx({_address(ctx, ops[0])}, {_src(ctx, ops[1])}, {complete}, "
            "__FILE__, __LINE__)")


def _mbar_wait(ctx, m, ops):
    if len(ops) not in (3, 4):
        raise ctx.err(f"`{_readable(ctx.text)}`: mbarrier.{m.group(1)}.parity takes a predicate, "
                      "[address], parity")
    return (f"{_dst(ctx, ops[0])} = __cudaemu_ptx::mbar_try_wait({_address(ctx, ops[1])}, "
            f"{_src(ctx, ops[2])}, __FILE__, __LINE__)")


def _tma_load(ctx, m, ops):
    rank = int(m.group(1))
    if m.group(2):
        ops = ops[:-1]   # the cache policy changes nothing here
    if len(ops) != 3 or ops[1][0] != "tensor":
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.async.bulk.tensor takes [dst], [map, "
                      "{coordinates}], [mbarrier]")
    _, base, coords = ops[1]
    if len(coords) != rank:
        raise ctx.err(f"`{_readable(ctx.text)}`: .{rank}d takes {rank} coordinates, the "
                      f"instruction gives {len(coords)}")
    cs = [_src(ctx, c) for c in coords] + ["0ull"] * (5 - rank)
    return (f"__cudaemu_ptx::tma_load({_address(ctx, ops[0])}, {_src(ctx, base)}, {rank}, "
            f"{', '.join(cs)}, {_address(ctx, ops[2])}, __FILE__, __LINE__)")


def _bulk_load(ctx, m, ops):
    if m.group(1):
        ops = ops[:-1]   # the cache policy changes nothing here
    if len(ops) != 4:
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.async.bulk takes [dst], [src], size, [mbarrier]")
    return (f"__cudaemu_ptx::bulk_load({_address(ctx, ops[0])}, {_address(ctx, ops[1])}, "
            f"{_src(ctx, ops[2])}, {_address(ctx, ops[3])}, __FILE__, __LINE__)")


def _bulk_reduce(ctx, m, ops):
    if m.group(1):
        ops = ops[:-1]   # the cache policy changes nothing here
    if len(ops) != 3:
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.reduce.async.bulk takes [dst], [src], size")
    return (f"__cudaemu_ptx::bulk_reduce_add_f32({_address(ctx, ops[0])}, {_address(ctx, ops[1])}, "
            f"{_src(ctx, ops[2])}, __FILE__, __LINE__)")


def _bulk_group(ctx, m, ops):
    if m.group(1) == "commit_group":
        _no_operands(ctx, ops)
        return "__cudaemu_ptx::bulk_group(-1, __FILE__, __LINE__)"
    if len(ops) != 1 or ops[0][0] not in ("imm", "op"):
        raise ctx.err(f"`{_readable(ctx.text)}`: cp.async.bulk.wait_group takes one number")
    return f"__cudaemu_ptx::bulk_group((long long){_src(ctx, ops[0])}, __FILE__, __LINE__)"


def _fence_proxy(ctx, m, ops):
    _no_operands(ctx, ops)
    return "__cudaemu_ptx::fence_proxy_async()"


def _no_op(ctx, m, ops):
    _no_operands(ctx, ops)
    return '__asm__ __volatile__("" ::: "memory")'


def _named_bar(ctx, m, ops):
    arrive = m.group(1) == "arrive"
    if len(ops) not in (1, 2) or (arrive and len(ops) != 2):
        raise ctx.err(f"`{_readable(ctx.text)}` takes a barrier id{', a thread count' if arrive else ' and optionally a thread count'}")
    if len(ops) == 1:   # bar.sync id: every thread of the block
        return (f"(({_src(ctx, ops[0])}) == 0 ? __cudaemu_sync(__FILE__, __LINE__) : "
                f"__cudaemu_ptx::named_bar({_src(ctx, ops[0])}, blockDim.x * blockDim.y * blockDim.z, "
                "0, __FILE__, __LINE__))")
    return (f"__cudaemu_ptx::named_bar({_src(ctx, ops[0])}, {_src(ctx, ops[1])}, {int(arrive)}, "
            "__FILE__, __LINE__)")


def _wgmma_sync(what):
    def handler(ctx, m, ops):
        if what in ("WG_WAIT", "WG_SETMAXNREG"):
            if len(ops) != 1 or ops[0][0] not in ("imm", "op"):
                raise ctx.err(f"`{_readable(ctx.text)}` takes one number")
            n = _src(ctx, ops[0])
        else:
            _no_operands(ctx, ops)
            n = "0ull"
        return f"__cudaemu_ptx::wgmma_sync(__cudaemu_ptx::{what}, {n}, __FILE__, __LINE__)"
    return handler


def _flag(ctx, v, bit: str, what: str) -> str:
    """A 0/1 (or -1/1 for a scale) immediate of wgmma as a flag of its parameter word."""
    if v[0] == "imm":
        if what == "scale":
            if v[1] not in (1, -1, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
                raise ctx.err(f"`{_readable(ctx.text)}`: imm-scale-a and imm-scale-b are 1 or -1")
            return bit if v[1] != 1 else "0"
        if v[1] not in (0, 1):
            raise ctx.err(f"`{_readable(ctx.text)}`: imm-trans-a and imm-trans-b are 0 or 1")
        return bit if v[1] else "0"
    value = f"(long long)(int)({_src(ctx, v)})"
    return f"(({value}) {'== -1' if what == 'scale' else '!= 0'} ? {bit} : 0)"


def _wgmma(ctx, m, ops):
    n = int(m.group(1))
    bf16 = m.group(2) == "bf16"
    if n % 8 or not 8 <= n <= 256:
        raise ctx.err(f"`{_readable(ctx.text)}`: N is a multiple of 8 from 8 to 256")
    if len(ops) < 7:
        raise ctx.err(f"`{_readable(ctx.text)}`: wgmma.mma_async takes d, a, b-desc, scale-d, "
                      "imm-scale-a, imm-scale-b and the transposes")
    d = _vec(ctx, ops[0], n // 2, "the accumulators (N / 2 registers)")
    a_regs = ops[1][0] == "vec"
    if len(ops) != (7 if a_regs else 8):
        raise ctx.err(f"`{_readable(ctx.text)}`: with A {'in registers' if a_regs else 'from a descriptor'} "
                      f"wgmma.mma_async takes {7 if a_regs else 8} operands")
    for x in d:
        if x[0] != "op" or not ctx.stmt.operands[x[1]].output:
            raise ctx.err(f"`{_readable(ctx.text)}`: the emulator needs each accumulator to be an "
                          'output operand of the asm ("+f" or "=f")')
    flags = [str(n), "0x200" if bf16 else "0", "0x400" if a_regs else "0",
             _flag(ctx, ops[4], "0x2000", "scale"), _flag(ctx, ops[5], "0x4000", "scale")]
    if a_regs:
        flags.append(_flag(ctx, ops[6], "0x1000", "trans"))
        a_ops = _vec(ctx, ops[1], 4, "A (four registers)")
        av = [f"(uint32_t)({_src(ctx, x)})" for x in a_ops]
        a_src = [_a_source(ctx, x) for x in a_ops]
        desc_a = "0ull"
    else:
        flags += [_flag(ctx, ops[6], "0x800", "trans"), _flag(ctx, ops[7], "0x1000", "trans")]
        av = ["0u"] * 4
        a_src = ["nullptr"] * 4
        desc_a = _src(ctx, ops[1])
    param = " | ".join(f"({f})" for f in flags)
    w = "__cudaemu_w"
    lines = [f"__cudaemu_wgmma_lane {w};", f"{w}.desc_a = {desc_a};", f"{w}.desc_b = {_src(ctx, ops[2])};"]
    lines += [f"{w}.a[{i}] = {v}; {w}.a_src[{i}] = {src};" for i, (v, src) in enumerate(zip(av, a_src))]
    lines.append(f"{w}.scale_d = ({_src(ctx, ops[3])}) != 0;")
    for i, x in enumerate(d):
        lines.append(f"{w}.c[{i}] = (uint32_t)({_op_local(ctx, x[1])}); "
                     f"{w}.out[{i}] = (float*)(void*)&({ctx.stmt.operands[x[1]].expr});")
    lines.append(f"__cudaemu_ptx::wgmma({param}, &{w}, __FILE__, __LINE__);")
    # The accumulators are the tensor cores' until a wgmma.wait_group covers this instruction.
    lines += [f"{_op_local(ctx, x[1])} = __cudaemu_ptx::UNSET;" for x in d]
    return "{ " + " ".join(lines) + " }"


# An lvalue held in a caller's storage: a name declared as a reference or a pointer, indexed or not.
_A_LVALUE = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\[[^\[\]]*\]\s*)*")


def _a_source(ctx, x) -> str:
    """Where a register of wgmma's A comes from, for the wait that covers it to check that it did not
    change meanwhile: the address of its variable when that outlives the call that issues the wgmma (a
    reference or pointer parameter's element, as in a helper `wgmma_o(acc, const unsigned (&a)[4],
    ...)`), else nullptr (not watched)."""
    if x[0] != "op":
        return "nullptr"
    o = ctx.stmt.operands[x[1]]
    m = _A_LVALUE.fullmatch(o.expr)
    if o.output or not m:
        return "nullptr"
    base = m.group(1)
    outlives = (f"(std::is_reference<decltype({base})>::value || "
                f"std::is_pointer<typename std::remove_reference<decltype({base})>::type>::value)")
    return f"__cudaemu_ptx::a_source<{outlives}>(&({o.expr}))"


def _selp(ctx, m, ops):
    if len(ops) != 4:
        raise ctx.err(f"`{_readable(ctx.text)}`: selp takes d, a, b, p")
    return (f"{_dst(ctx, ops[0])} = ({_src(ctx, ops[3])}) ? ({_src(ctx, ops[1])}) & 0xFFFFFFFFull "
            f": ({_src(ctx, ops[2])}) & 0xFFFFFFFFull")


_SH = r"\.shared(?:::cta)?"
_HANDLERS: list[tuple[re.Pattern, Callable]] = [
    (re.compile(r"mma\.sync\.aligned\.(m16n8k16|m16n8k8)\.row\.col\.f32\.(f16|bf16)\.\2\.f32"), _mma),
    (re.compile(r"ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?(\.shared(?:::cta)?)?\.b16"),
     _ldmatrix),
    (re.compile(r"cp\.async\.(ca|cg)\.shared(?:::cta)?\.global((?:\.L2::(?:64B|128B|256B|cache_hint))*)"),
     _cp_async),
    (re.compile(r"cp\.async\.commit_group"), _commit),
    (re.compile(r"cp\.async\.wait_group"), _wait_group),
    (re.compile(r"cp\.async\.wait_all"), _wait_all),
    (re.compile(r"cvta\.(to\.)?shared(::cta)?\.(u32|u64)"), _cvta),
    (re.compile(r"cvta\.(?:to\.)?global\.u64"), _cvta_global),
    (re.compile(r"cvt\.(?:u32\.u64|u64\.u32)"), _cvt_int),
    (re.compile(r"mov\.[bus](16|32|64)"), _mov),
    (re.compile(r"cvt\.rn\.(f16|bf16)x2\.f32"), _cvt_pack),
    (re.compile(r"cvt\.rn\.(f16|bf16)\.f32"), _cvt_narrow),
    (re.compile(r"cvt\.f32\.(f16|bf16)"), _cvt_widen),
    (re.compile(r"setp\.(eq|ne)\.(?:b32|u32|s32)"), _setp),
    (re.compile(r"selp\.(?:b32|u32|s32)"), _selp),
    (re.compile(r"mbarrier\.init" + _SH + r"\.b64"), _mbar_init),
    (re.compile(r"mbarrier\.arrive(\.expect_tx)?(?:\.release\.cta)?" + _SH + r"\.b64"), _mbar_arrive),
    (re.compile(r"mbarrier\.(expect_tx|complete_tx)(?:\.relaxed\.cta)?" + _SH + r"\.b64"), _mbar_tx),
    (re.compile(r"mbarrier\.(try_wait|test_wait)\.parity(?:\.acquire\.cta)?" + _SH + r"\.b64"), _mbar_wait),
    (re.compile(r"cp\.async\.bulk\.tensor\.([1-5])d\.shared::cluster\.global(?:\.tile)?"
                r"\.mbarrier::complete_tx::bytes(\.L2::cache_hint)?"), _tma_load),
    (re.compile(r"cp\.async\.bulk\.shared::(?:cluster|cta)\.global"
                r"\.mbarrier::complete_tx::bytes(\.L2::cache_hint)?"), _bulk_load),
    (re.compile(r"cp\.reduce\.async\.bulk\.global\.shared::cta\.bulk_group(\.L2::cache_hint)?\.add\.f32"),
     _bulk_reduce),
    (re.compile(r"cp\.async\.bulk\.(commit_group|wait_group)(?:\.read)?"), _bulk_group),
    (re.compile(r"fence\.proxy\.async(?:\.shared::cta|\.shared::cluster|\.global)?"), _fence_proxy),
    (re.compile(r"fence\.mbarrier_init\.release\.cluster"), _no_op),
    (re.compile(r"(?:bar|barrier)\.(sync|arrive)(?:\.aligned)?"), _named_bar),
    (re.compile(r"wgmma\.fence\.sync\.aligned"), _wgmma_sync("WG_FENCE")),
    (re.compile(r"wgmma\.commit_group\.sync\.aligned"), _wgmma_sync("WG_COMMIT")),
    (re.compile(r"wgmma\.wait_group\.sync\.aligned"), _wgmma_sync("WG_WAIT")),
    (re.compile(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32"), _wgmma_sync("WG_SETMAXNREG")),
    (re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(f16|bf16)\.\2"), _wgmma),
]


def _unsupported(ctx: _Ctx, what: str) -> AsmError:
    return ctx.err(f"inline PTX `{what}` is not supported by the CPU emulator. It runs only: "
                   f"{SUPPORTED}. Write the operation in CUDA C, or run on a GPU (--backend gpu).")


_REG_DECL = re.compile(r"\.reg\s+(\.\w+)\s+(.+)")


def translate(stmt: AsmStatement) -> str:
    """The C++ (one line) that replaces ``stmt``."""
    if len(stmt.variants) <= 1:
        return _translate(stmt, stmt.template, stmt.tpos)
    # The template's macros: compile each definition's translation, keep the one in force.
    parts = []
    for conditions, template, tpos in stmt.variants:
        test = " && ".join(f"__cudaemu_ptx::same({name}, {lit})" for name, lit in conditions)
        parts.append(f"if constexpr ({test}) {{ {_translate(stmt, template, tpos)}; }} else ")
    names = ", ".join(name for name, _ in stmt.variants[0][0])
    return (f"do {{ {''.join(parts)}__cudaemu_ptx::template_macro(\"{names}\", __FILE__, "
            "__LINE__); } while (0)")


def _translate(stmt: AsmStatement, template: str, tpos: list[int]) -> str:
    text, pos = _substitute(stmt, template, tpos)
    body = _statements(text, pos)
    if not body:
        return '__asm__ __volatile__("" ::: "memory")'   # a compiler barrier, as on the GPU
    regs: dict[str, str] = {}
    lines = []
    for instr, ipos in body:
        ctx = _Ctx(stmt, regs, ipos, instr)
        dm = _REG_DECL.fullmatch(instr)
        if dm:
            for name in dm.group(2).split(","):
                name = name.strip()
                rm = re.fullmatch(r"([A-Za-z_$][\w$]*)(?:<(\d+)>)?", name)
                if not rm:
                    raise ctx.err(f"cannot read the register declaration `{_readable(instr)}`")
                names = ([f"{rm.group(1)}{i}" for i in range(int(rm.group(2)))]
                         if rm.group(2) else [rm.group(1)])
                for nm in names:
                    regs[nm] = dm.group(1)
                    lines.append(f"__cudaemu_ptx::u64 __cudaemu_r_{_cname(nm)} = 0;")
            continue
        guard = ""
        gm = re.match(r"@(!?)([A-Za-z_$][\w$]*)\s+", instr)
        if gm:
            if regs.get(gm.group(2)) != ".pred":
                raise ctx.err(f"`{_readable(instr)}`: the guard @{gm.group(2)} is not a .pred "
                              "register this asm declares")
            guard = f"if ({'!' if gm.group(1) else ''}__cudaemu_r_{_cname(gm.group(2))}) "
            instr = instr[gm.end():]
            ctx.text = instr
        om = re.match(r"([A-Za-z_][\w.:]*)\s*(.*)", instr)
        if not om:
            raise _unsupported(ctx, _readable(instr))
        opcode, rest = om.group(1), om.group(2)
        for pattern, handler in _HANDLERS:
            hm = pattern.fullmatch(opcode)
            if hm:
                ops = [_parse_value(ctx, t) for t in _split_operands(rest)] if rest.strip() else []
                lines.append(f"{guard}{handler(ctx, hm, ops)};")
                break
        else:
            raise _unsupported(ctx, _readable(instr))
    return _wrap(stmt, " ".join(lines))


_STORE_BYTES = {"r": 4, "f": 4, "l": 8, "d": 8, "h": 2}


def _wrap(stmt: AsmStatement, body: str) -> str:
    outputs = [o for o in stmt.operands if o.output]
    init = {}
    for o in stmt.operands:
        if o.output:
            expr = f"__cudaemu_ptx::{o.kind}({o.expr})" if o.inout else "__cudaemu_ptx::UNSET"
            init.setdefault(o.index, expr)
    for o in stmt.operands:
        if o.output:
            continue
        value = f"__cudaemu_ptx::{o.kind}({o.expr})"
        if o.tied_to is not None:
            init[outputs[o.tied_to].index] = value   # the output's register starts with it
        else:
            init[o.index] = value
    decls = ", ".join(f"__cudaemu_a{k} = {v}" for k, v in sorted(init.items()))
    stores = " ".join(f"__cudaemu_ptx::store<{_STORE_BYTES[o.kind]}>(&({o.expr}), "
                      f"__cudaemu_a{o.index});" for o in outputs)
    parts = ["do {"]
    if decls:
        parts.append(f"__cudaemu_ptx::u64 {decls};")
    parts += [body, stores, "} while (0)"]
    return " ".join(p for p in parts if p)


def rewrite(source: str, where: Callable[[int], str]) -> str:
    """``source`` with every asm statement replaced by its emulation, lines kept.

    ``where(pos)`` names a source offset as 'file:line' for messages. Raises ValueError with the
    message (the caller makes it a CompileError) for anything the emulator cannot run.
    """
    try:
        stmts = find_statements(source)
        out, last = [], 0
        for s in stmts:
            repl = translate(s)
            span = source[s.start:s.end]
            tail = "".join(" \\\n" if line.rstrip(" \t").endswith("\\") else "\n"
                           for line in span.split("\n")[:-1])
            out.append(source[last:s.start])
            out.append(repl + tail)
            last = s.end
        out.append(source[last:])
        return "".join(out)
    except AsmError as e:
        raise ValueError(f"{where(e.pos)}: {e.message}") from None
