package io.peerload.plugin;

import java.nio.charset.StandardCharsets;

/**
 * The task tag of an object signed with storage credentials, the same as the operator's and the agent's
 * (src/storage/credential-tag.ts; shared vectors test/vectors/credential-tag.json): an HMAC-SHA256 keyed by the
 * credentials' secret over the storage kind and the bucket. The peer daemon's task id leaves the signature out of
 * the URL, so without this tag a bare GET of a private object's URL through a peer that holds its task is served
 * from the peer's cache; with it, only holders of the same secret name the task (they share it), and a request
 * without the tag is another task whose first request goes to the origin, which refuses it. The HMAC reveals
 * nothing of its key.
 */
final class CredentialTag {
  static final String PREFIX = "peerload-";
  private static final String CONTEXT = "peerload task tag v1";

  private CredentialTag() {}

  /** {@code peerload-} and the first 32 hex digits of HMAC-SHA256(key, context, type and scope). */
  static String of(String type, String scope, byte[] key) {
    byte[] mac = Crypto.hmacSha256(key, CONTEXT + "\n" + type + "\n" + scope);
    return PREFIX + Encoding.hexLower(mac).substring(0, 32);
  }

  static String of(String type, String scope, String key) {
    return of(type, scope, key.getBytes(StandardCharsets.UTF_8));
  }

  /** The tag a download sends: the configured tag and the credential tag joined by {@code /}; either alone. */
  static String join(String tag, String credential) {
    if (credential == null || credential.isEmpty()) {
      return tag == null || tag.isEmpty() ? null : tag;
    }
    return tag == null || tag.isEmpty() ? credential : tag + "/" + credential;
  }
}
