package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.peerload.plugin.fake.Fakes;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class RegistrarTest {
  @BeforeEach
  void reset() {
    Fakes.CALLS.clear();
    Fakes.nextError = null;
  }

  static Registrar.Request request() {
    Registrar.Request r = new Registrar.Request();
    r.url = "tiny.mar";
    r.modelName = "tiny";
    r.runtime = "python";
    r.batchSize = 4;
    r.maxBatchDelay = 50;
    r.responseTimeout = 30;
    r.startupTimeout = 90;
    r.initialWorkers = 0;
    return r;
  }

  @Test
  void twelveParameterSignatureOfTorchServe012() throws Exception {
    Registrar reg = Registrar.forClass(Fakes.ApiUtils12.class);
    assertEquals(12, reg.arity());
    Registrar.Result res = reg.register(request());
    assertEquals(200, res.status);
    List<Object> call = Fakes.CALLS.get(0);
    assertEquals(Arrays.asList("tiny.mar", "tiny", Fakes.RuntimeType.PYTHON, null, 4, 50, 30, 90, 0, true, false, false), call);
  }

  @Test
  void elevenParameterSignatureOfTorchServe08To011() throws Exception {
    Registrar reg = Registrar.forClass(Fakes.ApiUtils11.class);
    assertEquals(11, reg.arity());
    reg.register(request());
    assertEquals(Arrays.asList("tiny.mar", "tiny", Fakes.RuntimeType.PYTHON, null, 4, 50, 30, 0, true, false, false),
        Fakes.CALLS.get(0));
  }

  @Test
  void unknownSignatureFailsLoudlyAtLoad() {
    NoSuchMethodException e = assertThrows(NoSuchMethodException.class, () -> Registrar.forClass(Fakes.ApiUtilsUnknown.class));
    assertTrue(e.getMessage().contains("no supported"), e.getMessage());
    assertTrue(e.getMessage().contains("(String, String)"), e.getMessage());
    assertThrows(ClassNotFoundException.class, () -> Registrar.load(new ClassLoader(null) {}));
  }

  @Test
  void unsetTimeoutsBecomeTheServerDefaultsNotMinusOne() throws Exception {
    Registrar reg = Registrar.forClass(Fakes.ApiUtils12.class);
    Registrar.Request r = request();
    r.responseTimeout = -1;
    r.startupTimeout = -1;
    reg.register(r);
    // No ConfigManager next to the fake: TorchServe's documented default (120 s) for both.
    assertEquals(120, Fakes.CALLS.get(0).get(6));
    assertEquals(120, Fakes.CALLS.get(0).get(7));
  }

  @Test
  void runtimeIsOptionalAndValidated() throws Exception {
    Registrar reg = Registrar.forClass(Fakes.ApiUtils12.class);
    Registrar.Request r = request();
    r.runtime = null;
    reg.register(r);
    assertEquals(null, Fakes.CALLS.get(0).get(2));
    r.runtime = "cobol";
    assertEquals(400, assertThrows(PluginException.class, () -> reg.register(r)).status());
  }

  @Test
  void exceptionsMapToTorchServesStatuses() throws Exception {
    Registrar reg = Registrar.forClass(Fakes.ApiUtils12.class);
    Fakes.nextError = new Fakes.ConflictStatusException("Model version 1.0 is already registered for model tiny");
    PluginException conflict = assertThrows(PluginException.class, () -> reg.register(request()));
    assertEquals(409, conflict.status());
    assertEquals("Model version 1.0 is already registered for model tiny", conflict.getMessage());
    Fakes.nextError = new Fakes.ModelException("Model store has not been configured");
    assertEquals(400, assertThrows(PluginException.class, () -> reg.register(request())).status());
    Fakes.nextError = new Fakes.ModelNotFoundException("Model not found in model store: x.mar");
    assertEquals(404, assertThrows(PluginException.class, () -> reg.register(request())).status());
    Fakes.nextError = new Fakes.WorkerInitializationException("Failed to start workers");
    assertEquals(500, assertThrows(PluginException.class, () -> reg.register(request())).status());
    Fakes.nextError = new java.util.concurrent.ExecutionException(new RuntimeException("x"));
    assertEquals(500, assertThrows(PluginException.class, () -> reg.register(request())).status());
  }
}
