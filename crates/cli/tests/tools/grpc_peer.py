"""A gRPC server and client from the `grpcio` package (PyPI), for
crates/cli/tests/grpc.rs: real gRPC peers on both ends of the proxy. The
service is generic (bytes in, bytes out), so no generated code is needed.

  grpc_peer.py server                 serve on 127.0.0.1 (a free port),
                                      print "port N". Methods of test.Echo:
                                      Unary echoes its request; Fail ends
                                      with the status named in the request
                                      (e.g. b"NOT_FOUND"); Slow answers after
                                      2 s; Flaky fails every other call with
                                      UNAVAILABLE (the first included) and
                                      echoes the others.
  grpc_peer.py client TARGET METHOD REQUEST [TIMEOUT_S]
                                      call /test.Echo/METHOD through TARGET
                                      and print "ok <reply>" or
                                      "status <CODE> <details>"
"""

import itertools
import sys
import time
from concurrent import futures

import grpc


def unary(request, context):
    return request


def fail(request, context):
    context.abort(getattr(grpc.StatusCode, request.decode()), "failing on purpose")


flaky_calls = itertools.count(1)


def flaky(request, context):
    n = next(flaky_calls)
    if n % 2 == 1:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"call {n} is unavailable on purpose")
    return request


def slow(request, context):
    time.sleep(2)
    return request


def server():
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Flaky": grpc.unary_unary_rpc_method_handler(flaky),
    }
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    print(f"port {port}", flush=True)
    s.wait_for_termination()


def client(target, method, request, timeout):
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(f"/test.Echo/{method}")
        try:
            reply = call(request.encode(), timeout=timeout)
            print(f"ok {reply.decode()}", flush=True)
        except grpc.RpcError as e:
            print(f"status {e.code().name} {e.details()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server()
    else:
        timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 10.0
        client(sys.argv[2], sys.argv[3], sys.argv[4], timeout)
