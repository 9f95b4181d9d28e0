package io.peerload.plugin;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.WritableByteChannel;
import java.util.concurrent.ArrayBlockingQueue;

/**
 * Copies a response body into the temporary file with the socket reads and the file writes overlapped.
 *
 * <p>Why: reading 256 KiB then writing it on one thread made the download take network time plus disk time; with a
 * warm peer (bench row 3b, ~500 MiB/s from the proxy) the plugin reached only 0.63x of {@code curl -o /dev/null}.
 * Here the calling thread reads into one of a few fixed buffers while a writer thread writes the previous ones, so a
 * download takes about the longer of the two. (On the 2-core benchmark machine the overlap itself gained little:
 * the socket's buffer already absorbed short writes, and the larger cost was the close() flush described in
 * {@link ProxyDownloader}. It pays where a write can take longer than the socket's buffer lasts.) The buffers are
 * direct: a heap array costs an extra copy through the JDK's temporary direct buffer on the socket read and again
 * on {@code FileChannel.write}, CPU that the 2-core machine of the benchmark also needs for the proxy (~10% less
 * JVM CPU per GiB). Memory is {@link #BUFFERS} x {@link #BUFFER_SIZE} outside the heap, whatever the object size
 * (TorchServe runs with -Xmx384m).
 *
 * <p>Failures: a read failure stops the writer (it drops what is queued); a write failure wakes the reader even
 * while it waits for the network ({@code cancel}), and is the one reported. The writer thread has always ended
 * when {@link #copy} returns or throws.
 */
final class PipelinedCopy {
  /** The writer thread's name (tests look for leftovers by it). */
  static final String WRITER_THREAD = "peerload-download-writer";
  /** Lets the writer lag a few buffers behind (page-cache writes stall now and then) without holding up reads. */
  static final int BUFFERS = 4;
  static final int BUFFER_SIZE = 256 * 1024;
  /**
   * A buffer goes to the writer once it holds this much, not only when full: waiting to fill 256-512 KiB left the
   * writer idle then bursting, and was the slowest variant against the peer-proxy emulator on loopback (~15-25%
   * behind handing over whatever each read brought).
   */
  static final int HANDOFF = 64 * 1024;

  /**
   * Direct buffers are freed only when a GC finds them, which may not happen for a long time in a server that does
   * little else: reuse them across downloads instead of adding native memory at each one.
   */
  private static final ArrayBlockingQueue<ByteBuffer> SPARE = new ArrayBlockingQueue<>(BUFFERS);
  /** Reader to writer: nothing more to write. */
  private static final ByteBuffer DONE = ByteBuffer.allocate(0);
  /** Writer to reader: the write failed ({@link #writeFailure}). */
  private static final ByteBuffer FAILED = ByteBuffer.allocate(0);

  private final WritableByteChannel file;
  private final Runnable cancelReads;
  /** One more than the buffers, so that DONE and FAILED always fit: neither side ever blocks on a put. */
  private final ArrayBlockingQueue<ByteBuffer> empty = new ArrayBlockingQueue<>(BUFFERS + 1);
  private final ArrayBlockingQueue<ByteBuffer> full = new ArrayBlockingQueue<>(BUFFERS + 1);
  private volatile boolean aborted;
  private volatile Throwable writeFailure;

  /** @param cancelReads makes the reader's current and later reads fail at once (called by a failed writer) */
  PipelinedCopy(WritableByteChannel file, Runnable cancelReads) {
    this.file = file;
    this.cancelReads = cancelReads;
  }

  /**
   * Copies {@code body} to the file: {@code expected} bytes at most when it is known ({@code >= 0}), else up to the
   * end. Returns the bytes received; read failures are the network's (502), write failures the disk's (IOException,
   * 500).
   */
  long copy(ResponseBody body, long expected, String proxyName, String what)
      throws PluginException, IOException {
    return copy(body, expected, Long.MAX_VALUE - 1, proxyName, what);
  }

  /**
   * As {@link #copy(ResponseBody, long, String, String)}, with a bound for a body of unknown length: once more than
   * {@code maxBytes} arrived it fails with 413 ({@code max_bytes}), and the buffer holding the excess is never
   * written (a known length above the bound is refused before the copy starts).
   */
  long copy(ResponseBody body, long expected, long maxBytes, String proxyName, String what)
      throws PluginException, IOException {
    ByteBuffer[] buffers = new ByteBuffer[BUFFERS];
    for (int i = 0; i < BUFFERS; i++) {
      ByteBuffer b = SPARE.poll();
      buffers[i] = b != null ? b : ByteBuffer.allocateDirect(BUFFER_SIZE);
      empty.add(buffers[i]);
    }
    Thread writer = new Thread(this::drain, WRITER_THREAD);
    writer.setDaemon(true);
    writer.start();
    boolean finished = false;
    try {
      long total = 0;
      boolean end = false;
      while (!end) {
        ByteBuffer buf = nextEmpty();
        buf.clear();
        if (expected >= 0) {
          buf.limit((int) Math.min(buf.capacity(), expected - total));
          end = buf.limit() == 0;
        } else {
          // At most one byte past the bound is read: enough to know the body is too large.
          buf.limit((int) Math.min(buf.capacity(), maxBytes + 1 - total));
        }
        while (buf.hasRemaining() && buf.position() < HANDOFF) {
          int n;
          try {
            n = body.read(buf);
          } catch (IOException e) {
            throwWriteFailure(); // a failed writer cancelled this read: its error is the one to report
            throw DownloadFailures.readFailure(e, total, proxyName, what);
          }
          if (n < 0) {
            end = true;
            break;
          }
          total += n;
        }
        if (total > maxBytes) {
          empty.add(buf); // never handed to the writer
          throw DownloadFailures.tooLarge(what, "more than " + maxBytes + " bytes arrived (the peer proxy sent no "
              + "Content-Length)", maxBytes);
        }
        end |= expected >= 0 && total == expected;
        buf.flip();
        (buf.hasRemaining() ? full : empty).add(buf);
      }
      full.add(DONE);
      join(writer);
      finished = true;
      throwWriteFailure();
      return total;
    } finally {
      if (!finished) {
        aborted = true;
        full.offer(DONE);
        joinUninterruptibly(writer);
      }
      for (ByteBuffer b : buffers) {
        SPARE.offer(b);
      }
    }
  }

  /** The writer thread: writes the full buffers in order and gives them back, until DONE or a failure. */
  private void drain() {
    try {
      for (;;) {
        ByteBuffer b = full.take();
        if (b == DONE || aborted) {
          return;
        }
        while (b.hasRemaining()) {
          file.write(b);
        }
        empty.add(b);
      }
    } catch (InterruptedException e) {
      // the reader was interrupted and gave up: nothing to write any more
    } catch (IOException | RuntimeException | Error e) {
      writeFailure = e;
      empty.offer(FAILED);
      cancelReads.run();
    }
  }

  private ByteBuffer nextEmpty() throws IOException {
    ByteBuffer b;
    try {
      b = empty.take();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted");
    }
    if (b == FAILED) {
      throwWriteFailure();
    }
    return b;
  }

  private void join(Thread writer) throws IOException {
    try {
      writer.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted");
    }
  }

  /** Waits for the writer to end; if this thread is interrupted meanwhile, interrupts the writer (it then ends). */
  private static void joinUninterruptibly(Thread writer) {
    boolean interrupted = false;
    for (;;) {
      try {
        writer.join();
        break;
      } catch (InterruptedException e) {
        interrupted = true;
        writer.interrupt(); // a FileChannel write it is in fails at once (and closes the file, which is discarded)
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  private void throwWriteFailure() throws IOException {
    Throwable t = writeFailure;
    if (t instanceof IOException) {
      throw (IOException) t;
    } else if (t instanceof RuntimeException) {
      throw (RuntimeException) t;
    } else if (t instanceof Error) {
      throw (Error) t;
    }
  }
}
