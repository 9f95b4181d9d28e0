package io.peerload.plugin;

import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.pytorch.serve.servingsdk.Context;
import org.pytorch.serve.servingsdk.ModelServerEndpoint;
import org.pytorch.serve.servingsdk.annotations.Endpoint;
import org.pytorch.serve.servingsdk.annotations.helpers.EndpointTypes;
import org.pytorch.serve.servingsdk.http.Request;
import org.pytorch.serve.servingsdk.http.Response;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The management endpoint {@code /p2p}: {@code POST /p2p/models?file_name=<object key>} downloads the model
 * archive from the configured object storage through the local peer's HTTP proxy and registers it (seed 4.3).
 * Every answer is JSON with a {@code Status} string.
 */
@Endpoint(
    urlPattern = "p2p",
    endpointType = EndpointTypes.MANAGEMENT,
    description = "Download a model archive through the P2P network and register it")
public class P2PEndpoint extends ModelServerEndpoint {
  private static final Logger LOG = LoggerFactory.getLogger(P2PEndpoint.class);
  static final int CONNECT_TIMEOUT_MILLIS = 10_000;
  static final int READ_TIMEOUT_MILLIS = 300_000;

  private final ModelRegistration registration;
  private final String registrarError;

  public P2PEndpoint() {
    ConfigSource configs = ConfigSource.fromEnvironment();
    Registrar registrar = null;
    String error = null;
    try {
      registrar = Registrar.load(P2PEndpoint.class.getClassLoader());
      LOG.info("p2p endpoint: registering through {}.handleRegister with {} parameters",
          Registrar.API_UTILS, registrar.arity());
    } catch (ReflectiveOperationException | LinkageError e) {
      error = "this TorchServe version is not supported by the p2p plugin: " + e.getMessage();
      LOG.error("p2p endpoint: {}. Every /p2p request will fail with 500.", error);
    }
    registrarError = error;
    try {
      LOG.info("p2p endpoint: configuration {}: {}", configs.path(), configs.current());
    } catch (ConfigException e) {
      LOG.error("p2p endpoint: {} (requests fail until it is fixed; the file is re-read on every request)",
          e.getMessage());
    }
    final Registrar r = registrar;
    registration =
        new ModelRegistration(
            configs,
            new ProxyDownloader(CONNECT_TIMEOUT_MILLIS, READ_TIMEOUT_MILLIS),
            req -> {
              if (r == null) {
                throw PluginException.internal(registrarError, null);
              }
              return r.register(req);
            },
            Clock.systemUTC());
  }

  @Override
  public void doPost(Request req, Response rsp, Context ctx) throws IOException {
    String path = path(req.getRequestURI());
    if (!path.equals("/p2p/models") && !path.equals("/p2p/models/")) {
      send(rsp, 404, Json.status("unknown resource " + path + "; use POST /p2p/models?file_name=<object key>"));
      return;
    }
    Map<String, List<String>> params = req.getParameterMap();
    String modelStore = ctx.getConfig() == null ? null : ctx.getConfig().getProperty("model_store");
    ModelRegistration.Outcome out =
        registration.handle(params == null ? Collections.emptyMap() : params, modelStore);
    send(rsp, out.status, out.body);
  }

  @Override
  public void doGet(Request req, Response rsp, Context ctx) throws IOException {
    notAllowed(rsp);
  }

  @Override
  public void doPut(Request req, Response rsp, Context ctx) throws IOException {
    notAllowed(rsp);
  }

  @Override
  public void doDelete(Request req, Response rsp, Context ctx) throws IOException {
    notAllowed(rsp);
  }

  private static void notAllowed(Response rsp) throws IOException {
    rsp.setHeader("Allow", "POST");
    send(rsp, 405, Json.status("method not allowed; use POST /p2p/models?file_name=<object key>"));
  }

  static String path(String uri) {
    if (uri == null) {
      return "";
    }
    try {
      String p = URI.create(uri).getPath();
      return p == null ? "" : p;
    } catch (IllegalArgumentException e) {
      int q = uri.indexOf('?');
      return q < 0 ? uri : uri.substring(0, q);
    }
  }

  private static void send(Response rsp, int status, String json) throws IOException {
    byte[] body = json.getBytes(StandardCharsets.UTF_8);
    rsp.setStatus(status);
    rsp.setContentType("application/json");
    rsp.setHeader("Cache-Control", "no-store");
    OutputStream out = rsp.getOutputStream();
    out.write(body);
    out.flush();
  }
}
