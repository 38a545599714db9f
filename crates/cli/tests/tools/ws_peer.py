"""A WebSocket server and client from the `websockets` package (PyPI), for
crates/cli/tests/websocket.rs: real third-party peers on both ends of the
proxy.

  ws_peer.py server          listen on 127.0.0.1 (a free port), print
                             "port N", greet each client with "hello", then
                             answer every message m with "echo: m"
  ws_peer.py client URL N    connect to URL, expect "hello", send N messages,
                             expect each echo, print "ok N"; exit 1 otherwise.
                             Halfway it prints "half" and waits for a line on
                             stdin (the test reloads the proxy meanwhile).
"""

import asyncio
import sys

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve


async def handler(ws):
    await ws.send("hello")
    async for message in ws:
        await ws.send(f"echo: {message}")


async def server():
    async with serve(handler, "127.0.0.1", 0) as s:
        port = s.sockets[0].getsockname()[1]
        print(f"port {port}", flush=True)
        await s.serve_forever()


async def client(url, n):
    async with connect(url, open_timeout=10) as ws:
        greeting = await asyncio.wait_for(ws.recv(), 10)
        if greeting != "hello":
            raise SystemExit(f"greeting {greeting!r}")
        for i in range(n):
            if i == n // 2:
                print("half", flush=True)
                await asyncio.to_thread(sys.stdin.readline)
            await ws.send(f"message {i}")
            answer = await asyncio.wait_for(ws.recv(), 10)
            if answer != f"echo: message {i}":
                raise SystemExit(f"answer {answer!r} to message {i}")
    print(f"ok {n}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        asyncio.run(server())
    else:
        asyncio.run(client(sys.argv[2], int(sys.argv[3])))
