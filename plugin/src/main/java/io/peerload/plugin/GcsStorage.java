package io.peerload.plugin;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Google Cloud Storage: V4 signed URL with a service account's RSA key (GOOG4-RSA-SHA256, only {@code host}
 * signed, UNSIGNED-PAYLOAD), as in "V4 signing process with your own program". Proven on the conformance vectors of
 * googleapis/conformance-tests (storage/v1/v4_signatures.json).
 */
public final class GcsStorage extends ObjectStorage {
  private static final List<String> FILTER =
      Collections.unmodifiableList(
          Arrays.asList(
              "X-Goog-Algorithm",
              "X-Goog-Credential",
              "X-Goog-Date",
              "X-Goog-Expires",
              "X-Goog-SignedHeaders",
              "X-Goog-Signature"));

  private final String bucket;
  private final String projectId;
  private final String clientEmail;
  private final PrivateKey privateKey;
  private final String endpoint;

  /** @param endpoint null for Google; else a base URL (tests, emulators) */
  public GcsStorage(String bucket, String projectId, String clientEmail, PrivateKey privateKey, String endpoint) {
    this.bucket = bucket;
    this.projectId = projectId;
    this.clientEmail = clientEmail;
    this.privateKey = privateKey;
    this.endpoint = endpoint == null ? "https://storage.googleapis.com" : trimEndpoint(endpoint);
  }

  @Override
  public String type() {
    return "gcs";
  }

  @Override
  public String bucket() {
    return bucket;
  }

  public String projectId() {
    return projectId;
  }

  @Override
  public String credentialTag() {
    // PKCS#8 DER: one key whatever its PEM looked like, as the operator's side encodes it.
    return CredentialTag.of("gcs", bucket, privateKey.getEncoded());
  }

  @Override
  public List<String> defaultFilter() {
    return FILTER;
  }

  @Override
  public String objectUrl(String key) {
    return endpoint + "/" + bucket + "/" + Encoding.encodeKey(key);
  }

  @Override
  public String signedUrl(String key, Instant now, Duration expiry) throws PluginException {
    String url = objectUrl(key);
    URI uri = URI.create(url);
    // The signed host is the host name without a port, as Google's client libraries sign it for a custom
    // endpoint (storage.googleapis.com has none, so this only matters for emulators).
    String host = uri.getHost();
    String datetime = S3Storage.AMZ_DATE.format(now);
    String scope = S3Storage.DATE.format(now) + "/auto/storage/goog4_request";

    Map<String, String> query = new TreeMap<>();
    query.put("X-Goog-Algorithm", "GOOG4-RSA-SHA256");
    query.put("X-Goog-Credential", clientEmail + "/" + scope);
    query.put("X-Goog-Date", datetime);
    query.put("X-Goog-Expires", Long.toString(expiry.getSeconds()));
    query.put("X-Goog-SignedHeaders", "host");
    String canonicalQuery = S3Storage.canonicalQuery(query);

    String canonicalRequest =
        "GET\n" + uri.getRawPath() + "\n" + canonicalQuery + "\nhost:" + host + "\n\nhost\nUNSIGNED-PAYLOAD";
    String stringToSign =
        "GOOG4-RSA-SHA256\n" + datetime + "\n" + scope + "\n" + Crypto.sha256Hex(canonicalRequest);
    try {
      Signature rsa = Signature.getInstance("SHA256withRSA");
      rsa.initSign(privateKey);
      rsa.update(stringToSign.getBytes(StandardCharsets.UTF_8));
      return url + "?" + canonicalQuery + "&X-Goog-Signature=" + Encoding.hexLower(rsa.sign());
    } catch (GeneralSecurityException e) {
      throw PluginException.internal("cannot sign the GCS URL with the service account key", e);
    }
  }

  /** Reads the PKCS#8 PEM {@code private_key} of a service account JSON file. */
  static PrivateKey parsePrivateKey(String pem) throws GeneralSecurityException {
    String body =
        pem.replace("-----BEGIN PRIVATE KEY-----", "")
            .replace("-----END PRIVATE KEY-----", "")
            .replaceAll("\\s+", "");
    byte[] der = Base64.getDecoder().decode(body);
    return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(der));
  }
}
