package io.peerload.plugin;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/** JDK crypto helpers of the signers. */
final class Crypto {
  private Crypto() {}

  static byte[] hmac(String algorithm, byte[] key, String data) {
    try {
      Mac mac = Mac.getInstance(algorithm);
      mac.init(new SecretKeySpec(key, algorithm));
      return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(algorithm + " is not available in this JVM", e);
    }
  }

  static byte[] hmacSha256(byte[] key, String data) {
    return hmac("HmacSHA256", key, data);
  }

  static String sha256Hex(String data) {
    try {
      MessageDigest md = MessageDigest.getInstance("SHA-256");
      return Encoding.hexLower(md.digest(data.getBytes(StandardCharsets.UTF_8)));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("SHA-256 is not available in this JVM", e);
    }
  }
}
