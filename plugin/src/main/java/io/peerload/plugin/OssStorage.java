package io.peerload.plugin;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;

/**
 * Alibaba Cloud OSS: signature V1 in the URL ({@code OSSAccessKeyId}, {@code Expires}, {@code Signature} =
 * base64(HMAC-SHA1(secret, "GET\n\n\n" + Expires + "\n/" + bucket + "/" + key))), as in OSS's "Add signatures to
 * URLs".
 */
public final class OssStorage extends ObjectStorage {
  /**
   * The default filter: {@code OSSAccessKeyId} plus the seed's {@code Expires, Signature}, like the peer daemon's own
   * default and the operator's (src/storage/objecturl.ts DEFAULT_FILTERS, kept in step). Left in the task id, the
   * access key id would make the preheat and this download miss each other after a key rotation.
   */
  private static final List<String> FILTER =
      Collections.unmodifiableList(Arrays.asList("OSSAccessKeyId", "Expires", "Signature"));

  private final String bucket;
  private final String endpoint;
  private final String accessKeyId;
  private final String accessKeySecret;

  /** @param endpoint the region endpoint, e.g. {@code https://oss-cn-hangzhou.aliyuncs.com} (scheme optional) */
  public OssStorage(String bucket, String endpoint, String accessKeyId, String accessKeySecret) {
    this.bucket = bucket;
    String e = trimEndpoint(endpoint);
    this.endpoint = e.contains("://") ? e : "https://" + e;
    this.accessKeyId = accessKeyId;
    this.accessKeySecret = accessKeySecret;
  }

  @Override
  public String type() {
    return "oss";
  }

  @Override
  public String bucket() {
    return bucket;
  }

  @Override
  public String credentialTag() {
    return CredentialTag.of("oss", bucket, accessKeySecret);
  }

  @Override
  public List<String> defaultFilter() {
    return FILTER;
  }

  @Override
  public String objectUrl(String key) {
    URI e = URI.create(endpoint);
    String port = e.getPort() == -1 ? "" : ":" + e.getPort();
    return e.getScheme() + "://" + bucket + "." + e.getHost() + port + "/" + Encoding.encodeKey(key);
  }

  @Override
  public String signedUrl(String key, Instant now, Duration expiry) {
    long expires = now.getEpochSecond() + expiry.getSeconds();
    String signature = sign(accessKeySecret, "GET\n\n\n" + expires + "\n/" + bucket + "/" + key);
    return objectUrl(key)
        + "?OSSAccessKeyId="
        + Encoding.encodeQuery(accessKeyId)
        + "&Expires="
        + expires
        + "&Signature="
        + Encoding.encodeQuery(signature);
  }

  /** base64(HMAC-SHA1(secret, stringToSign)): the core of OSS signature V1 (header and URL forms). */
  static String sign(String secret, String stringToSign) {
    return Base64.getEncoder()
        .encodeToString(Crypto.hmac("HmacSHA1", secret.getBytes(StandardCharsets.UTF_8), stringToSign));
  }
}
