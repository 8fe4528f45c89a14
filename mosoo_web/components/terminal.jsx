// The owner's terminal (xterm.js) on the websocket of mosoo_web/api/terminal.py: keystrokes go
// as binary frames, the size as {"type": "resize"} text frames whenever the box changes size
// (the window's, or the dialog's), output comes back as binary frames. Unmounting it (the
// dialog closed, the page left) closes the socket, which ends the shell and all it started.
import React, { useEffect, useRef } from "react";
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";

const OPEN = 1; // WebSocket.OPEN

function socketUrl(path, terminal) {
  const url = new URL(path, window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("rows", String(terminal.rows));
  url.searchParams.set("cols", String(terminal.cols));
  return url;
}

export function MosooTerminal({ path, ...rest }) {
  const box = useRef(null);

  useEffect(() => {
    const terminal = new Terminal({
      cursorBlink: true,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      fontSize: 13,
      scrollback: 5000,
    });
    const fit = new FitAddon();
    terminal.loadAddon(fit);
    terminal.open(box.current);
    fit.fit();

    const socket = new WebSocket(socketUrl(path, terminal));
    socket.binaryType = "arraybuffer";
    const encoder = new TextEncoder();
    const send = (data) => socket.readyState === OPEN && socket.send(data);
    const sendSize = () =>
      send(JSON.stringify({ type: "resize", rows: terminal.rows, cols: terminal.cols }));

    socket.onopen = () => {
      fit.fit();
      sendSize();
      terminal.focus();
    };
    socket.onmessage = (event) => terminal.write(new Uint8Array(event.data));
    socket.onclose = (event) => {
      const why = event.reason || "The terminal closed.";
      terminal.write(`\r\n\x1b[2m[${why}]\x1b[0m\r\n`);
      box.current?.setAttribute("data-closed", why);
    };
    const typed = terminal.onData((data) => send(encoder.encode(data)));
    // Mouse reports in X10 mode are bytes, not UTF-8 text.
    const typedBinary = terminal.onBinary((data) =>
      send(Uint8Array.from(data, (char) => char.charCodeAt(0) & 0xff)),
    );
    const resized = terminal.onResize(sendSize);
    const refit = () => {
      try {
        fit.fit();
      } catch {
        // Not laid out (hidden): the next resize fits it.
      }
    };
    const observer = new ResizeObserver(refit);
    observer.observe(box.current);
    window.addEventListener("resize", refit);

    return () => {
      window.removeEventListener("resize", refit);
      observer.disconnect();
      typed.dispose();
      typedBinary.dispose();
      resized.dispose();
      socket.onclose = null;
      socket.close(1000, "The page closed the terminal.");
      terminal.dispose();
    };
  }, [path]);

  return <div ref={box} {...rest} />;
}
