package io.peerload.plugin;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;

/** A scripted HTTP proxy on loopback that records what it receives. */
final class FakeProxy implements AutoCloseable {
  /** One received request. */
  static final class Received {
    String requestLine;
    final Map<String, String> headers = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
  }

  /** Writes the response for a request. */
  interface Script {
    void respond(Received req, OutputStream out) throws IOException;
  }

  final List<Received> received = new CopyOnWriteArrayList<>();
  private final ServerSocket server;
  private volatile Script script;
  private final Thread thread;

  FakeProxy(Script script) throws IOException {
    this.script = script;
    this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    this.thread = new Thread(this::loop, "fake-proxy");
    thread.setDaemon(true);
    thread.start();
  }

  URI uri() {
    return URI.create("http://127.0.0.1:" + server.getLocalPort());
  }

  void script(Script s) {
    this.script = s;
  }

  private void loop() {
    while (!server.isClosed()) {
      try (Socket s = server.accept()) {
        Received r = read(s.getInputStream());
        received.add(r);
        OutputStream out = s.getOutputStream();
        script.respond(r, out);
        out.flush();
      } catch (IOException e) {
        // closed, or the client went away
      }
    }
  }

  private static Received read(InputStream in) throws IOException {
    Received r = new Received();
    r.requestLine = line(in);
    for (String l = line(in); !l.isEmpty(); l = line(in)) {
      int c = l.indexOf(':');
      r.headers.put(l.substring(0, c).trim(), l.substring(c + 1).trim());
    }
    return r;
  }

  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    for (int c = in.read(); c != '\n'; c = in.read()) {
      if (c < 0) {
        throw new IOException("eof");
      }
      if (c != '\r') {
        b.write(c);
      }
    }
    return b.toString(StandardCharsets.UTF_8);
  }

  /** A complete response with a Content-Length. */
  static Script ok(byte[] body, String... headers) {
    return (req, out) -> {
      StringBuilder h = new StringBuilder("HTTP/1.1 200 OK\r\nContent-Length: " + body.length + "\r\n");
      for (String x : headers) {
        h.append(x).append("\r\n");
      }
      out.write(h.append("\r\n").toString().getBytes(StandardCharsets.US_ASCII));
      out.write(body);
    };
  }

  static Script status(int code, String body, String... headers) {
    return (req, out) -> {
      byte[] b = body.getBytes(StandardCharsets.UTF_8);
      StringBuilder h = new StringBuilder("HTTP/1.1 " + code + " X\r\nContent-Length: " + b.length + "\r\n");
      for (String x : headers) {
        h.append(x).append("\r\n");
      }
      out.write(h.append("\r\n").toString().getBytes(StandardCharsets.US_ASCII));
      out.write(b);
    };
  }

  static String lower(String s) {
    return s.toLowerCase(Locale.ROOT);
  }

  @Override
  public void close() throws IOException {
    server.close();
  }
}
