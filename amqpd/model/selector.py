"""JMS message selectors (the SQL-92 subset of JMS 1.1 section 3.8.1), evaluated by the broker.

The broker's copy of the client's evaluator (interop/jms/selector.py): the broker never
imports a client and a client never imports the broker, so each keeps its own; the test
suite runs the same cases against both (tests/unit/test_selector_parity.py). Queues use it
for consumers that give an ``x-selector`` argument (amqpd/model/selective.py).

``compile_selector("color = 'red' AND weight > 2")`` returns a predicate over a lookup
function (identifier -> value or None). Evaluation uses SQL's three-valued logic: a missing
property is NULL, comparisons with NULL are unknown, and a message is selected only when the
whole expression is TRUE. Comparing values of different types (a string with a number) is
FALSE, as the JMS specification says.

Grammar (lowest precedence first)::

    or      := and ("OR" and)*
    and     := not ("AND" not)*
    not     := "NOT" not | compare
    compare := sum [ op sum | ["NOT"] "BETWEEN" sum "AND" sum | ["NOT"] "IN" "(" str, ... ")"
                   | ["NOT"] "LIKE" str ["ESCAPE" str] | "IS" ["NOT"] "NULL" ]
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := ("+" | "-") unary | literal | identifier | "(" or ")"
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Lookup", "Predicate", "SelectorError", "compile_selector"]


class SelectorError(ValueError):
    """The selector does not parse."""


Lookup = Callable[[str], Any]
Predicate = Callable[[Lookup], bool]
_Expr = Callable[[Lookup], Any]

_TOKEN: Final = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLfFdD]?)
      | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
      | (?P<op><>|<=|>=|[=<>+\-*/(),])
    )""",
    re.VERBOSE,
)
_KEYWORDS: Final = frozenset(
    {"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"}
)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string, number, ident, keyword, op, end
    text: str
    value: Any = None


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    end = len(text)
    while pos < end:
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SelectorError(f"selector {text!r}: unexpected {text[pos:].strip()!r}")
        pos = match.end()
        kind = match.lastgroup or "op"
        raw = match.group(kind)
        if kind == "string":
            tokens.append(_Token("string", raw, raw[1:-1].replace("''", "'")))
        elif kind == "number":
            tokens.append(_Token("number", raw, _number(raw)))
        elif kind == "ident" and raw.upper() in _KEYWORDS:
            tokens.append(_Token("keyword", raw.upper()))
        else:
            tokens.append(_Token(kind, raw))
    tokens.append(_Token("end", ""))
    return tokens


def _number(raw: str) -> int | float:
    if raw[:2] in ("0x", "0X"):
        return int(raw, 16)
    stripped = raw.rstrip("lLfFdD")
    if any(ch in stripped for ch in ".eE") or raw[-1] in "fFdD":
        return float(stripped)
    return int(stripped)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _and(left: Any, right: Any) -> bool | None:
    if left is False or right is False:
        return False
    if left is None or right is None:
        return None
    return True


def _or(left: Any, right: Any) -> bool | None:
    if left is True or right is True:
        return True
    if left is None or right is None:
        return None
    return False


def _compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    numbers = _is_number(left) and _is_number(right)
    same_kind = numbers or (type(left) is type(right) and isinstance(left, bool | str))
    if not same_kind:
        return False  # non-like types
    if not numbers and op not in ("=", "<>"):
        return False  # strings and booleans only compare for (in)equality
    if op == "=":
        return bool(left == right)
    if op == "<>":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _arith(op: str, left: Any, right: Any) -> Any:
    if not (_is_number(left) and _is_number(right)):
        return None
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if right == 0:
        return None
    if isinstance(left, int) and isinstance(right, int):
        return int(left / right)
    return left / right


def _like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    out = []
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise SelectorError(f"LIKE pattern {pattern!r} ends with the escape")
            out.append(re.escape(nxt))
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    # -- token helpers ---------------------------------------------------------------------
    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        token = self.peek()
        if token.kind == kind and token.text == text:
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, text: str) -> None:
        if not self.accept(kind, text):
            self.fail(f"expected {text!r}")

    def fail(self, problem: str) -> None:
        token = self.peek()
        where = repr(token.text) if token.kind != "end" else "end of selector"
        raise SelectorError(f"selector {self.text!r}: {problem} at {where}")

    def string(self) -> str:
        token = self.take()
        if token.kind != "string":
            self.pos -= 1
            self.fail("expected a string literal")
        return str(token.value)

    # -- grammar ---------------------------------------------------------------------------
    def parse(self) -> _Expr:
        expr = self.or_()
        if self.peek().kind != "end":
            self.fail("unexpected token")
        return expr

    def or_(self) -> _Expr:
        expr = self.and_()
        while self.accept("keyword", "OR"):
            left, right = expr, self.and_()
            expr = _binary(_or, left, right)
        return expr

    def and_(self) -> _Expr:
        expr = self.not_()
        while self.accept("keyword", "AND"):
            left, right = expr, self.not_()
            expr = _binary(_and, left, right)
        return expr

    def not_(self) -> _Expr:
        if self.accept("keyword", "NOT"):
            inner = self.not_()

            def negate(get: Lookup) -> Any:
                value = inner(get)
                return None if value is None else not value

            return negate
        return self.compare()

    def compare(self) -> _Expr:
        left = self.sum_()
        token = self.peek()
        if token.kind == "op" and token.text in ("=", "<>", "<", "<=", ">", ">="):
            self.take()
            right = self.sum_()
            op = token.text
            return lambda get: _compare(op, left(get), right(get))
        if self.accept("keyword", "IS"):
            negated = self.accept("keyword", "NOT")
            self.expect("keyword", "NULL")
            return lambda get: (left(get) is None) != negated
        negated = self.accept("keyword", "NOT")
        if self.accept("keyword", "BETWEEN"):
            return self._between(left, negated)
        if self.accept("keyword", "IN"):
            return self._in(left, negated)
        if self.accept("keyword", "LIKE"):
            return self._like(left, negated)
        if negated:
            self.fail("expected BETWEEN, IN or LIKE after NOT")
        return left

    def _between(self, left: _Expr, negated: bool) -> _Expr:
        low = self.sum_()
        self.expect("keyword", "AND")
        high = self.sum_()

        def between(get: Lookup) -> Any:
            value = left(get)
            result = _and(_compare(">=", value, low(get)), _compare("<=", value, high(get)))
            return result if result is None or not negated else not result

        return between

    def _in(self, left: _Expr, negated: bool) -> _Expr:
        self.expect("op", "(")
        items = {self.string()}
        while self.accept("op", ","):
            items.add(self.string())
        self.expect("op", ")")

        def in_(get: Lookup) -> Any:
            value = left(get)
            if value is None:
                return None
            if not isinstance(value, str):
                return False
            return (value in items) != negated

        return in_

    def _like(self, left: _Expr, negated: bool) -> _Expr:
        pattern = self.string()
        escape = None
        if self.accept("keyword", "ESCAPE"):
            escape = self.string()
            if len(escape) != 1:
                self.fail("ESCAPE takes a single character")
        regex = _like_pattern(pattern, escape)

        def like(get: Lookup) -> Any:
            value = left(get)
            if value is None:
                return None
            if not isinstance(value, str):
                return False
            return (regex.fullmatch(value) is not None) != negated

        return like

    def sum_(self) -> _Expr:
        expr = self.product()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.take().text
            left, right = expr, self.product()
            expr = _arith_expr(op, left, right)
        return expr

    def product(self) -> _Expr:
        expr = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/"):
            op = self.take().text
            left, right = expr, self.unary()
            expr = _arith_expr(op, left, right)
        return expr

    def unary(self) -> _Expr:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda get: -value if _is_number(value := inner(get)) else None
        if self.accept("op", "+"):
            return self.unary()
        token = self.take()
        if token.kind in ("string", "number"):
            constant = token.value
            return lambda _get: constant
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            flag = token.text == "TRUE"
            return lambda _get: flag
        if token.kind == "ident":
            name = token.text
            return lambda get: get(name)
        if token.kind == "op" and token.text == "(":
            inner = self.or_()
            self.expect("op", ")")
            return inner
        self.pos -= 1
        self.fail("expected a value")
        raise AssertionError  # pragma: no cover (fail raises)


def _binary(combine: Callable[[Any, Any], Any], left: _Expr, right: _Expr) -> _Expr:
    return lambda get: combine(left(get), right(get))


def _arith_expr(op: str, left: _Expr, right: _Expr) -> _Expr:
    return lambda get: _arith(op, left(get), right(get))


def compile_selector(text: str) -> Predicate:
    """Compile a JMS selector into a predicate over a property lookup.

    Args:
        text: The selector, e.g. ``"JMSPriority > 4 AND region LIKE 'eu-%'"``.

    Returns:
        ``predicate(lookup)``: True when the message is selected; ``lookup(name)`` returns the
        value of a header or property, or None when the message has none.

    Raises:
        SelectorError: the text does not parse.
    """
    if not text.strip():
        return lambda _get: True
    expr = _Parser(text).parse()
    return lambda get: expr(get) is True
