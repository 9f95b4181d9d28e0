package io.peerload.plugin;

import java.io.IOException;
import java.nio.ByteBuffer;

/** Where a response body's bytes come from: the socket, or the chunk decoder over it; -1 at the end. */
interface ResponseBody {
  int read(ByteBuffer dst) throws IOException;
}
