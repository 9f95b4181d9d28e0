package io.peerload.plugin;

import java.time.Duration;
import java.time.Instant;
import java.util.List;

/**
 * One object storage kind of seed 1.3 / 2.2: where an object lives (the unsigned URL, which must equal the one the
 * operator's TypeScript side builds so both compute the same task id) and how a download URL is signed.
 *
 * <p>The signers are written by hand instead of using the vendors' SDKs: the AWS, Aliyun, Google and Azure Java SDKs
 * would bring 30-80 MB of Netty, Jackson, gRPC and friends into TorchServe's JVM, where they can clash with the
 * server's own copies of the same libraries. Each signer is a few dozen lines of JDK crypto and is proven in the
 * JUnit suite on the vendors' published test vectors (and SigV4 against a real MinIO in the e2e test).
 */
public abstract class ObjectStorage {
  /** Validity of a signed URL: long enough for a multi-GB cold download to start, short enough to be useless later. */
  public static final Duration DEFAULT_EXPIRY = Duration.ofHours(1);

  /** The value of {@code object_storage.type}. */
  public abstract String type();

  /** Bucket (or container) name, for messages. */
  public abstract String bucket();

  /** The object's URL without any signature. */
  public abstract String objectUrl(String key);

  /** The object's URL signed for one GET, valid for {@code expiry} from {@code now}. */
  public abstract String signedUrl(String key, Instant now, Duration expiry) throws PluginException;

  /**
   * The tag these credentials give every object of this bucket ({@link CredentialTag}): part of the task id of each
   * download, so that only holders of the same secret share the task.
   */
  public abstract String credentialTag();

  /** Query parameters left out of the task id when the configuration has no {@code filter} (seed 2.2). */
  public abstract List<String> defaultFilter();

  /** Strips trailing slashes of a configured endpoint. */
  static String trimEndpoint(String endpoint) {
    String e = endpoint.trim();
    while (e.endsWith("/")) {
      e = e.substring(0, e.length() - 1);
    }
    return e;
  }
}
