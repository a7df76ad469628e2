"""The TensorBoard log receiver, in TensorBoard's pod (`k8s/tensorboard.py`): `PUT /<relative
path>` with `X-Offset: N` appends the body to that file at byte N and answers the file's size;
bytes it already has are skipped, so a resend is harmless; a gap is refused with 409 and the
size it has. argv: root directory, port."""

import http.server
import os
import sys
import threading
import urllib.parse

root, port, lock = os.path.realpath(sys.argv[1]), int(sys.argv[2]), threading.Lock()


class Receiver(http.server.BaseHTTPRequestHandler):
    def reply(self, code, text):
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        relative = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        target = os.path.realpath(os.path.join(root, relative))
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not relative or not target.startswith(root + os.sep):
            return self.reply(400, "a path inside the log directory, please")
        offset = int(self.headers.get("X-Offset", 0))
        with lock:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "ab") as log:
                size = log.tell()
                gap = offset > size
                if not gap:
                    log.write(data[size - offset :])
                    log.flush()
                    os.fsync(log.fileno())
                    size = log.tell()
        # Answered once the bytes are in the file: the shipper never resends what it was told
        # is stored, so an acknowledged byte must not sit in a buffer.
        self.reply(409 if gap else 200, str(size))

    def log_message(self, *args):
        pass


print(f"aichor: receiving TensorBoard logs into {root} on port {port}", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", port), Receiver).serve_forever()
