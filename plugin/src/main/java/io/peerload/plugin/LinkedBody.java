package io.peerload.plugin;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;

/**
 * The body of a download whose file the peer daemon is still filling through our hard link (a task it did not hold
 * yet): read to its end and not written anywhere, so the archive costs no write of its own. The daemon's proxy sends
 * a piece only after it wrote that piece to its file, so a body received whole means the file is whole. What that
 * does not prove is that the link IS the file being filled (a daemon that filled another file and linked a
 * placeholder would leave an archive of zeros), so blocks of the body spread over its length, the last one
 * included, are kept and compared with the linked file at the same offsets; a mismatch falls back to streaming.
 */
final class LinkedBody {
  static final int SAMPLES = 16;
  static final int SAMPLE_SIZE = 4096;
  private static final int READ_BUFFER = 256 * 1024;

  private final long expected;
  private final long[] offsets;
  private final byte[][] samples;

  /** @param expected the announced length (the link is taken only for a body of known length) */
  LinkedBody(long expected) {
    this.expected = expected;
    // A body of one block or less is one sample; any longer one gets all of them (they may overlap), its last block too.
    int n = expected <= SAMPLE_SIZE ? 1 : SAMPLES;
    offsets = new long[n];
    samples = new byte[n][];
    for (int k = 0; k < n; k++) {
      long start = n == 1 ? 0 : (expected - SAMPLE_SIZE) * k / (n - 1);
      offsets[k] = start;
      samples[k] = new byte[(int) Math.min(SAMPLE_SIZE, expected - start)];
    }
  }

  /** Reads the body to its end, keeping the samples; returns the bytes received (read failures are the network's). */
  long drain(ResponseBody body, String proxyName, String what) throws PluginException {
    // Direct: a heap buffer would cost another copy of every byte through the JDK's temporary direct buffer.
    ByteBuffer buf = ByteBuffer.allocateDirect(READ_BUFFER);
    long total = 0;
    while (total < expected) {
      buf.clear();
      buf.limit((int) Math.min(buf.capacity(), expected - total));
      int n;
      try {
        n = body.read(buf);
      } catch (IOException e) {
        throw DownloadFailures.readFailure(e, total, proxyName, what);
      }
      if (n < 0) {
        break;
      }
      keep(buf, n, total);
      total += n;
    }
    return total;
  }

  /** Copies the parts of {@code chunk} (the body's bytes from {@code at}) that fall in a sample. */
  private void keep(ByteBuffer chunk, int length, long at) {
    for (int k = 0; k < offsets.length; k++) {
      long from = Math.max(offsets[k], at);
      long to = Math.min(offsets[k] + samples[k].length, at + length);
      if (from < to) {
        ByteBuffer part = chunk.duplicate(); // the absolute bulk get is Java 13+; this builds for 11
        part.position((int) (from - at));
        part.get(samples[k], (int) (from - offsets[k]), (int) (to - from));
      }
    }
  }

  /** Null when the file holds the kept samples at their offsets; else what differs. */
  String mismatch(Path file) {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
      for (int k = 0; k < offsets.length; k++) {
        ByteBuffer got = ByteBuffer.allocate(samples[k].length);
        while (got.hasRemaining()) {
          if (ch.read(got, offsets[k] + got.position()) < 0) {
            return "the daemon's file ends before byte " + (offsets[k] + got.position());
          }
        }
        if (!Arrays.equals(got.array(), samples[k])) {
          return "the daemon's file differs from the body at byte " + offsets[k];
        }
      }
      return null;
    } catch (IOException e) {
      return "cannot read the daemon's file to check it: " + DownloadFailures.reason(e);
    }
  }
}
