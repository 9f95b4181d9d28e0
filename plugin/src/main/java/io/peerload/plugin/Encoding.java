package io.peerload.plugin;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/** Percent-encoding rules shared by the URL layouts and the signers. */
public final class Encoding {
  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  private Encoding() {}

  private static boolean unreserved(int b) {
    return (b >= 'A' && b <= 'Z')
        || (b >= 'a' && b <= 'z')
        || (b >= '0' && b <= '9')
        || b == '-'
        || b == '.'
        || b == '_'
        || b == '~';
  }

  /**
   * RFC 3986 encoding of an object key for a URL path: unreserved characters and {@code /} kept, every other
   * UTF-8 byte as %XX (upper case). This is also the canonical URI of SigV4 (S3 does not double-encode) and GCS V4.
   */
  public static String encodeKey(String key) {
    return encode(key, true);
  }

  /** RFC 3986 encoding of one query name or value (also {@code /} encoded), as SigV4 and GCS V4 require. */
  public static String encodeQuery(String s) {
    return encode(s, false);
  }

  private static String encode(String s, boolean keepSlash) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    StringBuilder out = new StringBuilder(bytes.length + 16);
    for (byte raw : bytes) {
      int b = raw & 0xff;
      if (unreserved(b) || (keepSlash && b == '/')) {
        out.append((char) b);
      } else {
        out.append('%').append(HEX[b >> 4]).append(HEX[b & 0xf]);
      }
    }
    return out.toString();
  }

  /**
   * Go's {@code url.QueryEscape}: unreserved kept, space as {@code +}, everything else %XX. Used by the task id
   * canonicalisation of the peer daemon.
   */
  public static String formEncode(String s) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    StringBuilder out = new StringBuilder(bytes.length + 16);
    for (byte raw : bytes) {
      int b = raw & 0xff;
      if (unreserved(b)) {
        out.append((char) b);
      } else if (b == ' ') {
        out.append('+');
      } else {
        out.append('%').append(HEX[b >> 4]).append(HEX[b & 0xf]);
      }
    }
    return out.toString();
  }

  /**
   * The WHATWG application/x-www-form-urlencoded serialiser (Rust's {@code form_urlencoded}, JavaScript's {@code
   * URLSearchParams}): ASCII letters, digits and {@code * - . _} kept, space as {@code +}, everything else %XX. Used
   * by the task id of peer daemons before 1.5.3.
   */
  public static String wwwFormEncode(String s) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    StringBuilder out = new StringBuilder(bytes.length + 16);
    for (byte raw : bytes) {
      int b = raw & 0xff;
      boolean kept = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
          || b == '*' || b == '-' || b == '.' || b == '_';
      if (kept) {
        out.append((char) b);
      } else if (b == ' ') {
        out.append('+');
      } else {
        out.append('%').append(HEX[b >> 4]).append(HEX[b & 0xf]);
      }
    }
    return out.toString();
  }

  /**
   * application/x-www-form-urlencoded decoding ({@code +} is a space, %XX a byte); a malformed escape is kept
   * literally, as the WHATWG form decoder the peer daemon uses does.
   */
  public static String formDecode(String s) {
    ByteArrayOutputStream out = new ByteArrayOutputStream(s.length());
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    for (int i = 0; i < bytes.length; i++) {
      byte b = bytes[i];
      if (b == '+') {
        out.write(' ');
      } else if (b == '%' && i + 2 < bytes.length && hex(bytes[i + 1]) >= 0 && hex(bytes[i + 2]) >= 0) {
        out.write(hex(bytes[i + 1]) * 16 + hex(bytes[i + 2]));
        i += 2;
      } else {
        out.write(b);
      }
    }
    return new String(out.toByteArray(), StandardCharsets.UTF_8);
  }

  private static int hex(byte c) {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
      return c - 'A' + 10;
    }
    return -1;
  }

  /** Lower-case hex of bytes. */
  public static String hexLower(byte[] bytes) {
    StringBuilder out = new StringBuilder(bytes.length * 2);
    for (byte raw : bytes) {
      int b = raw & 0xff;
      out.append(Character.forDigit(b >> 4, 16)).append(Character.forDigit(b & 0xf, 16));
    }
    return out.toString();
  }
}
