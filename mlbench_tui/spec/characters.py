"""Characters a spec may not hold, and letters that only look like the ones a spec expects.

Control, invisible and bidirectional formatting characters make a value read differently from
what runs (the "Trojan Source" class, CVE-2021-42574), so every key and string is checked for
them. Letters of other scripts that look like ASCII ones (Cyrillic 'а', Greek 'ο', fullwidth 'ｓ')
are named with their code point: a key or value that only looks right is explained as a foreign
letter, not reported as a typo.
"""

from __future__ import annotations

import re
import unicodedata

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Letters and marks that draw nothing (category Lo or Mn, so the category test misses them).
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0") | frozenset(
    chr(c) for c in (*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0))
)
_ALLOWED_CONTROLS = frozenset("\t\n")

# Letters of other scripts drawn like an ASCII letter (after NFKC, which already folds fullwidth
# and mathematical letters); from Unicode's confusables for the Latin, Cyrillic and Greek scripts.
_CONFUSABLE = {
    **dict(zip("аеіјорсухѕԁһԛԝӏ", "aeijopcyxsdhqwl", strict=True)),
    **dict(zip("АВЕКМНОРСТХЅІЈҮԚԜӀ", "ABEKMHOPCTXSIJYQWI", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧοναιρκυχ", "ABEZHIKMNOPTYXovaipkux", strict=True)),
    **dict(zip("ıɡօսհոǀ", "igouhnl", strict=True)),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    "\u00a0": " ",
}
_WORD = re.compile(r"\w+")


def _name(char: str) -> str:
    return unicodedata.name(char, "unnamed")


def forbidden_character(text: str, what: str = "value") -> str | None:
    """A message naming the first control, invisible or bidirectional character in ``text``
    (tab and newline are fine) and where it is, or None."""
    for index, char in enumerate(text):
        if char.isascii() and (char.isprintable() or char in _ALLOWED_CONTROLS):
            continue
        where = f"at character {index + 1} of the {what}"
        category = unicodedata.category(char)
        if category == "Cc" and char not in _ALLOWED_CONTROLS:
            return f"control character U+{ord(char):04X} {where}"
        if char in _BIDI:
            return (
                f"bidirectional control character U+{ord(char):04X} ({_name(char)}) {where}: "
                "it makes the text display in another order than it is read"
            )
        if category in ("Cf", "Zl", "Zp") or char in _INVISIBLE:
            return f"invisible character U+{ord(char):04X} ({_name(char)}) {where}"
    return None


def ascii_lookalike(char: str) -> str | None:
    """The ASCII character ``char`` is drawn like (``'а'`` -> ``'a'``), or None."""
    if char.isascii():
        return None
    if char in _CONFUSABLE:
        return _CONFUSABLE[char]
    folded = unicodedata.normalize("NFKC", char)
    if len(folded) == 1 and folded.isascii() and folded.isprintable():
        return folded
    return None


def skeleton(text: str) -> str:
    """``text`` with every look-alike letter replaced by the ASCII one it is drawn like."""
    return "".join(ascii_lookalike(char) or char for char in text)


def foreign_letters(text: str, *, whole: bool) -> str | None:
    """Why ``text`` only looks like ASCII: each look-alike letter with its code point and name,
    or None. With ``whole`` (keys, which a spec always spells in ASCII) any look-alike counts;
    otherwise only one in a word that also holds ASCII letters (``glοo``), since a word wholly in
    another script is text someone meant to write."""
    found: dict[str, str] = {}
    words = [text] if whole else _WORD.findall(text)
    for word in words:
        if not whole and not any(c.isascii() and c.isalpha() for c in word):
            continue
        for char in word:
            plain = ascii_lookalike(char)
            if plain is not None and char not in found:
                found[char] = plain
    if not found:
        return None
    named = ", ".join(f"U+{ord(c):04X} {_name(c)} (drawn like '{plain}')" for c, plain in found.items())
    return f"{text!r} holds {'a letter' if len(found) == 1 else 'letters'} of another script: {named}"
