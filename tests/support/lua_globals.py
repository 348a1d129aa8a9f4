"""The globals a Lua 5.1 chunk reads and writes, from its bytecode (``string.dump``)."""

from __future__ import annotations

import struct

GETGLOBAL, SETGLOBAL = 5, 7


def chunk_globals(dump: bytes) -> tuple[set[str], set[str]]:
    header = dump[:12]
    assert header[:4] == b"\x1bLua" and header[4] == 0x51, header
    little = header[6] == 1
    int_size, size_t, instr_size, number_size = header[7], header[8], header[9], header[10]
    order = "<" if little else ">"
    pos = 12
    read: set[str] = set()
    written: set[str] = set()

    def integer(size: int) -> int:
        nonlocal pos
        value = int.from_bytes(dump[pos : pos + size], "little" if little else "big")
        pos += size
        return value

    def string() -> bytes | None:
        nonlocal pos
        size = integer(size_t)
        if size == 0:
            return None
        value = dump[pos : pos + size - 1]
        pos += size
        return value

    def function() -> None:
        nonlocal pos
        string()  # source
        integer(int_size), integer(int_size)  # line defined, last line defined
        pos += 4  # nups, numparams, is_vararg, maxstacksize
        code = [integer(instr_size) for _ in range(integer(int_size))]
        constants: list[object] = []
        for _ in range(integer(int_size)):
            kind = dump[pos]
            pos += 1
            if kind == 0:
                constants.append(None)
            elif kind == 1:
                constants.append(bool(dump[pos]))
                pos += 1
            elif kind == 3:
                constants.append(struct.unpack(order + "d", dump[pos : pos + number_size])[0])
                pos += number_size
            elif kind == 4:
                constants.append(string())
            else:
                raise AssertionError(f"constant of type {kind}")
        for _ in range(integer(int_size)):
            function()
        pos += int_size * integer(int_size)  # line info
        for _ in range(integer(int_size)):  # local variables
            string()
            integer(int_size), integer(int_size)
        for _ in range(integer(int_size)):  # upvalue names
            string()
        for instruction in code:
            opcode, bx = instruction & 0x3F, instruction >> 14
            if opcode in (GETGLOBAL, SETGLOBAL):
                name = constants[bx]
                assert isinstance(name, bytes)
                (read if opcode == GETGLOBAL else written).add(name.decode())

    function()
    return read, written
