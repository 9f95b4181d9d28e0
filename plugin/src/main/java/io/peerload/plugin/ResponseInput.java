package io.peerload.plugin;

import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;

/**
 * The response side of the connection. A non-blocking channel and a selector rather than a socket's stream with
 * SO_TIMEOUT, so that the body can be read straight into the copy's direct buffers (a blocking SocketChannel
 * ignores SO_TIMEOUT, and the stream of a socket reads into heap arrays through a temporary direct buffer), and
 * so that a failed file write can wake a read that waits for the network ({@link #cancel}).
 */
final class ResponseInput extends InputStream implements ResponseBody {
  /** Reads the head a buffer at a time; the body goes around it, straight into the copy's buffers. */
  private static final int HEAD_BUFFER = 16 * 1024;

  private final SocketChannel channel;
  private final int timeoutMillis;
  /** System.nanoTime() at which the whole download must have ended ({@code download_timeout}). */
  private final long deadlineNanos;
  /** The {@code download_timeout} the deadline comes from, for messages. */
  private final long budgetMillis;
  /** Holds the head and the chunk-size lines; whatever body bytes it read ahead are handed over first. */
  private final ByteBuffer ahead = ByteBuffer.allocate(HEAD_BUFFER).flip();
  private volatile Selector selector; // cancel() runs on the writer thread
  private volatile boolean cancelled;

  /** Past the download's overall deadline: unlike an idle read, data may still be arriving. */
  static final class DeadlineExceeded extends SocketTimeoutException {
    private static final long serialVersionUID = 1L;
    /** The {@code download_timeout} that ran out. */
    final long budgetMillis;

    DeadlineExceeded(long budgetMillis) {
      super("download deadline exceeded");
      this.budgetMillis = budgetMillis;
    }
  }

  ResponseInput(SocketChannel channel, int timeoutMillis) {
    this(channel, timeoutMillis, Long.MAX_VALUE, 0);
  }

  /**
   * @param budgetMillis the {@code download_timeout} the deadline comes from, for messages
   * @param deadlineNanos the {@link System#nanoTime()} after which every read fails with {@link DeadlineExceeded},
   *     however steadily data arrives (an endless chunked body would otherwise never end); {@code Long.MAX_VALUE}
   *     for none
   */
  ResponseInput(SocketChannel channel, int timeoutMillis, long deadlineNanos, long budgetMillis) {
    this.channel = channel;
    this.timeoutMillis = timeoutMillis;
    this.deadlineNanos = deadlineNanos;
    this.budgetMillis = budgetMillis;
  }

  /** Sends the request (blocking: it fits in the socket's buffer), then switches to timed non-blocking reads. */
  void send(byte[] request) throws IOException {
    ByteBuffer b = ByteBuffer.wrap(request);
    while (b.hasRemaining()) {
      channel.write(b);
    }
    channel.configureBlocking(false);
    selector = Selector.open();
    channel.register(selector, SelectionKey.OP_READ);
  }

  /** Makes the current and every later read fail at once (the copy's writer failed: reading on is useless). */
  void cancel() {
    cancelled = true;
    Selector s = selector;
    if (s != null) {
      s.wakeup();
    }
  }

  @Override
  public int read() throws IOException {
    if (!ahead.hasRemaining()) {
      ahead.clear();
      int n = fill(ahead);
      ahead.flip();
      if (n < 0) {
        return -1;
      }
    }
    return ahead.get() & 0xff;
  }

  @Override
  public int read(byte[] b, int off, int len) throws IOException {
    return len == 0 ? 0 : read(ByteBuffer.wrap(b, off, len));
  }

  @Override
  public int read(ByteBuffer dst) throws IOException {
    if (!dst.hasRemaining()) {
      return 0;
    }
    if (ahead.hasRemaining()) {
      int n = Math.min(ahead.remaining(), dst.remaining());
      ByteBuffer part = ahead.duplicate();
      part.limit(part.position() + n);
      dst.put(part);
      ahead.position(ahead.position() + n);
      return n;
    }
    return fill(dst);
  }

  /** One read of at least a byte, or -1; SocketTimeoutException when nothing came for the read time-out. */
  private int fill(ByteBuffer dst) throws IOException {
    long start = System.nanoTime();
    for (;;) {
      if (cancelled) {
        throw new IOException("cancelled");
      }
      long untilDeadline = deadlineNanos == Long.MAX_VALUE ? Long.MAX_VALUE : deadlineNanos - System.nanoTime();
      if (untilDeadline <= 0) {
        throw new DeadlineExceeded(budgetMillis);
      }
      int n = channel.read(dst);
      if (n != 0) {
        return n;
      }
      if (Thread.currentThread().isInterrupted()) {
        // select() returns at once on an interrupted thread: without this the loop would spin
        throw new InterruptedIOException("interrupted");
      }
      long waitMillis = 0; // no time-out
      if (timeoutMillis > 0) {
        long left = TimeUnit.MILLISECONDS.toNanos(timeoutMillis) - (System.nanoTime() - start);
        if (left <= 0) {
          throw new SocketTimeoutException("Read timed out");
        }
        waitMillis = Math.max(1, TimeUnit.NANOSECONDS.toMillis(left));
      }
      if (untilDeadline != Long.MAX_VALUE) {
        long toDeadline = Math.max(1, TimeUnit.NANOSECONDS.toMillis(untilDeadline));
        waitMillis = waitMillis == 0 ? toDeadline : Math.min(waitMillis, toDeadline);
      }
      selector.select(waitMillis);
      selector.selectedKeys().clear();
    }
  }

  @Override
  public void close() throws IOException {
    if (selector != null) {
      selector.close();
    }
  }
}
