package io.peerload.plugin;

import java.net.URI;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;

/**
 * Azure Blob Storage: a service SAS for one blob, read-only, signed with the account key (HMAC-SHA256 over the
 * string-to-sign of "Create a service SAS", versions 2020-12-06 and later).
 */
public final class AbsStorage extends ObjectStorage {
  /** The SAS version we sign (the same as the operator's TypeScript signer; Azurite 3.35+ accepts it). */
  public static final String SAS_VERSION = "2025-11-05";

  static final DateTimeFormatter SAS_TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss'Z'").withZone(ZoneOffset.UTC);

  /** Every query parameter a SAS can carry (account, service and user-delegation SAS). */
  private static final List<String> FILTER =
      Collections.unmodifiableList(
          Arrays.asList(
              "sv", "ss", "srt", "spr", "st", "se", "sip", "si", "ses", "sr", "sp", "sig", "sdd", "skoid",
              "sktid", "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "sduoid", "skdutid", "srh", "srq",
              "rscc", "rscd", "rsce", "rscl", "rsct"));

  private final String account;
  private final byte[] accountKey;
  private final String container;
  private final String endpoint;

  /** @param endpoint null for Azure; else e.g. Azurite's {@code http://127.0.0.1:10000} */
  public AbsStorage(String account, String accountKeyBase64, String container, String endpoint) {
    this.account = account;
    this.accountKey = Base64.getDecoder().decode(accountKeyBase64);
    this.container = container;
    this.endpoint = endpoint == null ? null : trimEndpoint(endpoint);
  }

  @Override
  public String type() {
    return "abs";
  }

  @Override
  public String bucket() {
    return container;
  }

  @Override
  public String credentialTag() {
    return CredentialTag.of("abs", account + "/" + container, accountKey);
  }

  @Override
  public List<String> defaultFilter() {
    return FILTER;
  }

  @Override
  public String objectUrl(String key) {
    String k = Encoding.encodeKey(key);
    if (endpoint == null) {
      return "https://" + account + ".blob.core.windows.net/" + container + "/" + k;
    }
    // An account endpoint (https://acct.blob.core.windows.net, a private link...) already names the account;
    // an emulator or IP endpoint (Azurite) carries it as the first path segment.
    String host = URI.create(endpoint).getHost();
    if (host != null && host.startsWith(account + ".")) {
      return endpoint + "/" + container + "/" + k;
    }
    return endpoint + "/" + account + "/" + container + "/" + k;
  }

  @Override
  public String signedUrl(String key, Instant now, Duration expiry) {
    return objectUrl(key) + "?" + sasQuery(key, now.plus(expiry));
  }

  /**
   * The SAS query string: service SAS for one blob ({@code sr=b}), read only ({@code sp=r}), no start time (no
   * clock-skew failures), any protocol; parameters in the order of the operator's signer so both sides produce the
   * same URL.
   */
  String sasQuery(String key, Instant expiryTime) {
    String se = SAS_TIME.format(expiryTime);
    String canonicalResource = "/blob/" + account + "/" + container + "/" + key;
    String stringToSign =
        String.join(
            "\n",
            "r", // signedPermissions
            "", // signedStart
            se, // signedExpiry
            canonicalResource,
            "", // signedIdentifier
            "", // signedIP
            "", // signedProtocol
            SAS_VERSION, // signedVersion
            "b", // signedResource
            "", // signedSnapshotTime
            "", // signedEncryptionScope
            "", // rscc
            "", // rscd
            "", // rsce
            "", // rscl
            ""); // rsct
    String sig = Base64.getEncoder().encodeToString(Crypto.hmacSha256(accountKey, stringToSign));
    return "sv=" + SAS_VERSION
        + "&se=" + Encoding.encodeQuery(se)
        + "&sr=b&sp=r"
        + "&sig=" + Encoding.encodeQuery(sig);
  }
}
