package io.peerload.plugin;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** Status line and headers of an HTTP/1.1 response, read with a size bound (a proxy could send anything). */
final class ResponseHead {
  /** The most a head (and a chunked body's trailers) may take. */
  static final int MAX_HEAD = 64 * 1024;

  final int status;
  final List<String[]> headers;

  ResponseHead(int status, List<String[]> headers) {
    this.status = status;
    this.headers = headers;
  }

  String header(String name) {
    for (String[] h : headers) {
      if (h[0].equalsIgnoreCase(name)) {
        return h[1];
      }
    }
    return null;
  }

  boolean chunked() {
    String te = header("Transfer-Encoding");
    return te != null && te.toLowerCase(Locale.ROOT).contains("chunked");
  }

  static ResponseHead read(InputStream in) throws IOException {
    int[] budget = {MAX_HEAD};
    String statusLine = line(in, budget);
    // HTTP/1.1 200 OK
    String[] parts = statusLine.split(" ", 3);
    if (parts.length < 2 || !parts[0].startsWith("HTTP/")) {
      throw new IOException("not an HTTP response");
    }
    int status;
    try {
      status = Integer.parseInt(parts[1]);
    } catch (NumberFormatException e) {
      throw new IOException("not an HTTP status");
    }
    List<String[]> headers = new ArrayList<>();
    for (;;) {
      String l = line(in, budget);
      if (l.isEmpty()) {
        break;
      }
      int colon = l.indexOf(':');
      if (colon > 0) {
        headers.add(new String[] {l.substring(0, colon).trim(), l.substring(colon + 1).trim()});
      }
    }
    return new ResponseHead(status, headers);
  }

  /** One line without its CR LF; {@code budget[0]} is what may still be read, shared across the lines of a head. */
  static String line(InputStream in, int[] budget) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream(128);
    for (;;) {
      int c = in.read();
      if (c < 0) {
        throw new EOFException();
      }
      if (--budget[0] < 0) {
        throw new IOException("response head too large");
      }
      if (c == '\n') {
        byte[] bytes = b.toByteArray();
        int len = bytes.length > 0 && bytes[bytes.length - 1] == '\r' ? bytes.length - 1 : bytes.length;
        return new String(bytes, 0, len, StandardCharsets.ISO_8859_1);
      }
      b.write(c);
    }
  }
}
