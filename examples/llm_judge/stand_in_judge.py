"""A stand-in judge for the example: an OpenAI-compatible /chat/completions endpoint on 127.0.0.1 that grades
like a (very strict, very simple) model would. In real use, point ``base_url`` at your vLLM, SGLang or OpenAI
endpoint instead."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def grade(body: dict) -> str:
    tag = re.search(r"VERDICT ([0-9a-f]+):", body["messages"][0]["content"]).group(1)
    user = body["messages"][1]["content"]
    completion = user.split(f"<<<COMPLETION {tag}>>>\n")[1].split(f"\n<<<END COMPLETION {tag}>>>")[0]
    reference = user.split(f"<<<REFERENCE {tag}>>>\n")[1].split(f"\n<<<END REFERENCE {tag}>>>")[0]
    question = user.split(f"<<<PROMPT {tag}>>>\n")[1].split(f"\n<<<END PROMPT {tag}>>>")[0]
    if not question.strip():
        return f"No question was given.\nVERDICT {tag}: 0"
    if not completion.strip():
        return "There is nothing to grade."  # no verdict line: asked again without it, the answer gets the lowest grade
    right = reference in completion
    return f"The answer is {'right' if right else 'not supported'}.\nVERDICT {tag}: {9 if right else 2}"


class Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # reply at once (as a real server does), not after a delayed ACK

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": grade(body)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def start() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
