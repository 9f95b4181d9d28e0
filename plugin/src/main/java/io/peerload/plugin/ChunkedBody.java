package io.peerload.plugin;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;

/** Decodes {@code Transfer-Encoding: chunked}; a body cut before the last chunk is an error, not an EOF. */
final class ChunkedBody extends InputStream implements ResponseBody {
  private final ResponseInput in;
  private long remaining;
  private boolean done;

  ChunkedBody(ResponseInput in) {
    this.in = in;
  }

  @Override
  public int read() throws IOException {
    byte[] one = new byte[1];
    int n = read(one, 0, 1);
    return n < 0 ? -1 : one[0] & 0xff;
  }

  @Override
  public int read(byte[] b, int off, int len) throws IOException {
    return len == 0 ? 0 : read(ByteBuffer.wrap(b, off, len));
  }

  @Override
  public int read(ByteBuffer dst) throws IOException {
    if (done) {
      return -1;
    }
    if (remaining == 0) {
      String size = ResponseHead.line(in, new int[] {4096});
      int semi = size.indexOf(';');
      try {
        remaining = Long.parseLong((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
      } catch (NumberFormatException e) {
        throw new IOException("invalid chunk size");
      }
      if (remaining == 0) {
        // trailers, then the empty line
        int[] budget = {ResponseHead.MAX_HEAD};
        while (!ResponseHead.line(in, budget).isEmpty()) {
          // skip
        }
        done = true;
        return -1;
      }
    }
    int limit = dst.limit();
    if (dst.remaining() > remaining) {
      dst.limit(dst.position() + (int) remaining);
    }
    int n;
    try {
      n = in.read(dst);
    } finally {
      dst.limit(limit);
    }
    if (n < 0) {
      throw new EOFException("chunked body truncated");
    }
    remaining -= n;
    if (remaining == 0) {
      ResponseHead.line(in, new int[] {2 + 1}); // CRLF after the chunk data
    }
    return n;
  }
}
