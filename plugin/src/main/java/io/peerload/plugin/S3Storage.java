package io.peerload.plugin;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Amazon S3 and S3-compatible stores: AWS Signature Version 4 query-string authentication (presigned GET,
 * UNSIGNED-PAYLOAD, only {@code host} signed), as in "Authenticating Requests: Using Query Parameters (AWS
 * Signature Version 4)".
 */
public final class S3Storage extends ObjectStorage {
  static final DateTimeFormatter AMZ_DATE =
      DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'").withZone(ZoneOffset.UTC);
  static final DateTimeFormatter DATE = DateTimeFormatter.ofPattern("yyyyMMdd").withZone(ZoneOffset.UTC);

  private static final List<String> FILTER =
      Collections.unmodifiableList(
          Arrays.asList(
              "X-Amz-Algorithm",
              "X-Amz-Credential",
              "X-Amz-Date",
              "X-Amz-Expires",
              "X-Amz-SignedHeaders",
              "X-Amz-Signature",
              "X-Amz-Security-Token"));

  private final String bucket;
  private final String region;
  private final String accessKey;
  private final String secretKey;
  private final String sessionToken;
  private final String endpoint;
  private final boolean pathStyle;

  /**
   * @param endpoint null for AWS; else the store's base URL (scheme, host and port, no path)
   * @param sessionToken null unless temporary credentials are used
   */
  public S3Storage(
      String bucket,
      String region,
      String accessKey,
      String secretKey,
      String sessionToken,
      String endpoint,
      boolean pathStyle) {
    this.bucket = bucket;
    this.region = region == null || region.isEmpty() ? "us-east-1" : region;
    this.accessKey = accessKey;
    this.secretKey = secretKey;
    this.sessionToken = sessionToken;
    this.endpoint = endpoint == null ? null : trimEndpoint(endpoint);
    this.pathStyle = pathStyle;
  }

  @Override
  public String type() {
    return "s3";
  }

  @Override
  public String bucket() {
    return bucket;
  }

  @Override
  public String credentialTag() {
    return CredentialTag.of("s3", bucket, secretKey);
  }

  public String region() {
    return region;
  }

  @Override
  public List<String> defaultFilter() {
    return FILTER;
  }

  @Override
  public String objectUrl(String key) {
    String k = Encoding.encodeKey(key);
    if (endpoint == null) {
      return "https://" + bucket + ".s3." + region + ".amazonaws.com/" + k;
    }
    if (pathStyle) {
      return endpoint + "/" + bucket + "/" + k;
    }
    URI e = URI.create(endpoint);
    String port = e.getPort() == -1 ? "" : ":" + e.getPort();
    return e.getScheme() + "://" + bucket + "." + e.getHost() + port + "/" + k;
  }

  @Override
  public String signedUrl(String key, Instant now, Duration expiry) {
    String url = objectUrl(key);
    URI uri = URI.create(url);
    String host = uri.getPort() == -1 ? uri.getHost() : uri.getHost() + ":" + uri.getPort();
    String amzDate = AMZ_DATE.format(now);
    String date = DATE.format(now);
    String scope = date + "/" + region + "/s3/aws4_request";

    Map<String, String> query = new TreeMap<>();
    query.put("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
    query.put("X-Amz-Credential", accessKey + "/" + scope);
    query.put("X-Amz-Date", amzDate);
    query.put("X-Amz-Expires", Long.toString(expiry.getSeconds()));
    if (sessionToken != null && !sessionToken.isEmpty()) {
      query.put("X-Amz-Security-Token", sessionToken);
    }
    query.put("X-Amz-SignedHeaders", "host");
    String canonicalQuery = canonicalQuery(query);

    String canonicalRequest =
        "GET\n"
            + uri.getRawPath()
            + "\n"
            + canonicalQuery
            + "\n"
            + "host:"
            + host
            + "\n\n"
            + "host\n"
            + "UNSIGNED-PAYLOAD";
    String stringToSign =
        "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + Crypto.sha256Hex(canonicalRequest);
    String signature = Encoding.hexLower(Crypto.hmacSha256(signingKey(date), stringToSign));
    return url + "?" + canonicalQuery + "&X-Amz-Signature=" + signature;
  }

  private byte[] signingKey(String date) {
    byte[] k = Crypto.hmacSha256(("AWS4" + secretKey).getBytes(StandardCharsets.UTF_8), date);
    k = Crypto.hmacSha256(k, region);
    k = Crypto.hmacSha256(k, "s3");
    return Crypto.hmacSha256(k, "aws4_request");
  }

  /** Names and values RFC 3986-encoded, sorted by encoded name (all names here are ASCII). */
  static String canonicalQuery(Map<String, String> sorted) {
    StringBuilder q = new StringBuilder();
    for (Map.Entry<String, String> e : sorted.entrySet()) {
      if (q.length() > 0) {
        q.append('&');
      }
      q.append(Encoding.encodeQuery(e.getKey())).append('=').append(Encoding.encodeQuery(e.getValue()));
    }
    return q.toString();
  }
}
