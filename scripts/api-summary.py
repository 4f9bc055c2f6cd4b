#!/usr/bin/env python3
"""The public API of a module as stable text (an API change nobody meant fails CI).

Reads `swift-api-digester -dump-sdk` JSON and prints one line per public declaration: its
kind, name, type and modifiers, nested under its type, conformances listed. Usage:
    scripts/api-summary.py dump.json > docs/api/HeraldKit.txt
"""
import json
import sys

DECLS = {"Struct", "Class", "Enum", "Protocol", "Func", "Var", "Constructor", "EnumElement", "TypeAlias", "Subscript"}


def type_name(node):
    return node.get("printedName", "?") if node else "?"


def line(node):
    kind = node.get("declKind")
    children = node.get("children", [])
    name = node.get("printedName", node.get("name", "?"))
    mods = []
    if node.get("static"):
        mods.append("static")
    if node.get("throwing"):
        mods.append("throws")
    # The digester has no async flag; the mangled function type ends in `Ya…F` when async.
    mangled = node.get("mangledName", "")
    if kind in ("Func", "Constructor") and "Ya" in mangled[-6:]:
        mods.append("async")
    if node.get("isLet"):
        mods.append("let")
    if node.get("hasSetter") is False and kind == "Var":
        mods.append("get")
    attrs = node.get("declAttributes", [])
    if attrs:
        mods.extend(a for a in attrs if a not in ("Documentation",))
    suffix = (" [" + ", ".join(sorted(set(mods))) + "]") if mods else ""
    if kind in ("Func", "Constructor", "Subscript"):
        result = type_name(children[0]) if children else "?"
        params = ", ".join(type_name(c) for c in children[1:])
        return f"{kind.lower()} {name} ({params}) -> {result}{suffix}"
    if kind in ("Var", "EnumElement", "TypeAlias"):
        return f"{kind.lower()} {name}: {type_name(children[0]) if children else '?'}{suffix}"
    conformances = sorted(c.get("printedName", "") for c in node.get("conformances", []))
    return f"{kind.lower()} {name}" + (f" : {', '.join(conformances)}" if conformances else "") + suffix


def blocks(node, depth):
    """Each declaration's line and, for a type, its members' blocks after it; sorted per level."""
    result = []
    for child in node.get("children", []):
        # `isInternal`: a `package` (or SPI) declaration, not the public API apps see.
        if child.get("declKind") in DECLS and not child.get("isInternal"):
            block = ["  " * depth + line(child)]
            if child.get("declKind") in ("Struct", "Class", "Enum", "Protocol"):
                for member in blocks(child, depth + 1):
                    block.extend(member)
            result.append(block)
    return sorted(result, key=lambda block: block[0].strip())


def main():
    root = json.load(open(sys.argv[1]))["ABIRoot"]
    for block in blocks(root, 0):
        print("\n".join(block))


main()
