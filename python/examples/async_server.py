"""An asyncio HTTP server that hands out broker tensors as .npy files, waiting for them to be
published without blocking its event loop.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/async_server.py [--socket PATH] [--port N]
    curl -o x.npy 'http://127.0.0.1:8080/tensors/demo/x?timeout=30'

GET /tensors/NAME?timeout=SECONDS waits up to SECONDS (default: 10) for NAME with
client.get_async: 200 with the tensor as a .npy body, 404 if it was not published in time.
Every request waits on its own; a client that hangs up while waiting cancels its wait (no
waiter is left in the daemon).
"""

import argparse
import asyncio
import io
import urllib.parse

import numpy as np

import tensorbroker

DEFAULT_TIMEOUT = 10.0


async def answer(writer, status, body=b"", content_type="text/plain"):
    head = (f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    writer.write(head.encode() + body)
    await writer.drain()


async def wait_for_tensor(client, name, timeout, reader):
    """The tensor, or None when the requester hung up first (its wait is cancelled)."""
    got = asyncio.create_task(client.get_async(name, timeout))
    hung_up = asyncio.create_task(reader.read())  # b"" at EOF: nothing more is expected
    done, _ = await asyncio.wait({got, hung_up}, return_when=asyncio.FIRST_COMPLETED)
    if got in done:
        hung_up.cancel()
        return got.result()  # raises tensorbroker.Timeout if it ran out
    got.cancel()  # the daemon drops the waiter; a tensor granted meanwhile is released
    try:
        await got
    except asyncio.CancelledError:
        pass
    return None


async def serve_one(client, reader, writer):
    try:
        request_line = (await reader.readline()).decode("latin-1").split()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # headers: none needed
        if len(request_line) < 2 or request_line[0] != "GET":
            return await answer(writer, "405 Method Not Allowed", b"GET only\n")
        url = urllib.parse.urlsplit(request_line[1])
        if not url.path.startswith("/tensors/"):
            return await answer(writer, "404 Not Found", b"GET /tensors/NAME?timeout=S\n")
        name = urllib.parse.unquote(url.path[len("/tensors/"):])
        query = urllib.parse.parse_qs(url.query)
        timeout = float(query.get("timeout", [DEFAULT_TIMEOUT])[0])
        try:
            tensor = await wait_for_tensor(client, name, timeout, reader)
        except tensorbroker.Timeout:
            return await answer(writer, "404 Not Found", f"{name}: not published\n".encode())
        except tensorbroker.Error as e:
            return await answer(writer, "400 Bad Request", f"{e}\n".encode())
        if tensor is None:
            return  # the requester is gone
        with tensor:  # releases the lease once the bytes are copied out
            body = io.BytesIO()
            np.save(body, np.asarray(tensor), allow_pickle=False)
        await answer(writer, "200 OK", body.getvalue(), "application/x-npy")
    except (ConnectionError, ValueError) as e:
        try:
            await answer(writer, "400 Bad Request", f"{e}\n".encode())
        except ConnectionError:
            pass
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", default=None, help="the daemon's socket (default: the usual one)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0: any free port")
    args = parser.parse_args()
    client = tensorbroker.connect(args.socket)
    server = await asyncio.start_server(lambda r, w: serve_one(client, r, w), args.host,
                                        args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"serving tensors on http://{args.host}:{port}/tensors/NAME", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
