#!/usr/bin/python3
"""A TCP proxy that can cut the link, for partition tests: tcp_proxy.py TARGET CUT_FILE.
Listens on 127.0.0.1 (a free port, printed as "proxy listening on HOST:PORT") and forwards
every connection to TARGET (HOST:PORT). While CUT_FILE exists, every open connection is
dropped and new ones are closed at once, as if the network between the two were down."""
import asyncio
import os
import sys


async def main():
    target_host, target_port = sys.argv[1].rsplit(":", 1)
    cut_file = sys.argv[2]
    links = set()

    async def pipe(reader, writer):
        try:
            while not os.path.exists(cut_file):
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(client_reader, client_writer):
        if os.path.exists(cut_file):
            client_writer.close()
            return
        try:
            reader, writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            client_writer.close()
            return
        link = (client_writer, writer)
        links.add(link)
        await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))
        links.discard(link)

    async def watch_cut():
        while True:
            if os.path.exists(cut_file):
                for link in list(links):
                    for w in link:
                        w.transport.abort()
            await asyncio.sleep(0.05)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"proxy listening on {host}:{port}", flush=True)
    asyncio.ensure_future(watch_cut())
    async with server:
        await server.serve_forever()


asyncio.run(main())
